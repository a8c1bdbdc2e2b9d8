// The checkpoint layer: durable, checksummed step directories and their manifests. It moves bytes
// between named tensors and disk; it never knows what a model or an optimizer is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/ckpt/manifest.h"
#include "tessera/core/tensor.h"

namespace tessera::ckpt {

// A view to save from or load into; the checkpoint never owns tensor memory.
using tessera::NamedTensor;

// Writes <run_dir>/step-<step, 6 digits>/ so that a crash at any moment leaves either the old
// state or the complete new step, never a half-written step that could be chosen: everything is
// built in a hidden .tmp directory, fsynced, marked with COMMIT last, renamed into place, and then
// `latest` is switched atomically. Afterwards the oldest committed steps beyond `keep_last` are
// deleted (never the one just written; keep_last <= 0 keeps all). One writer per run directory.
// Returns the step directory.
std::filesystem::path save(const std::filesystem::path& run_dir, int64_t step,
                           const std::vector<NamedTensor>& tensors, const nlohmann::json& metadata,
                           int keep_last);

// Accepts a committed step directory, or a run directory: follows `latest`, or when that is
// missing or names an uncommitted directory, takes the newest committed step-* directory.
std::filesystem::path resolve(const std::filesystem::path& run_or_step_dir);

// The checkpoint a run directory would resume from (as resolve() picks it), or nullopt when the
// directory does not exist or holds no committed step, so a fresh run can start from scratch.
std::optional<std::filesystem::path> find_latest(const std::filesystem::path& run_dir);

// Fills each view from the committed step directory, matching by name; shapes and dtypes must
// agree exactly. Every byte is checked against the manifest's crc32. On error the views may hold
// partial data.
void load(const std::filesystem::path& step_dir, const std::vector<NamedTensor>& tensors);

// "step-000123" for 123.
std::string step_dir_name(int64_t step);

}  // namespace tessera::ckpt
