// The checkpoint layer: durable, checksummed step directories and their manifests. It moves bytes
// between named tensors and disk; it never knows what a model or an optimizer is.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/ckpt/data_image.h"
#include "tessera/ckpt/manifest.h"
#include "tessera/core/tensor.h"

namespace tessera::ckpt {

// A view to save from or load into; the checkpoint never owns tensor memory.
using tessera::NamedTensor;

// Writes <run_dir>/step-<step, 6 digits>/ so that a crash at any moment leaves either the old
// state or the complete new step, never a half-written step that could be chosen: everything is
// built in a hidden .tmp directory, fsynced, marked with COMMIT last, renamed into place, and then
// `latest` is switched atomically. Afterwards the oldest committed steps beyond `keep_last` are
// deleted (never the one just written, nor the base model a LoRA run's metadata names as
// "lora_base"; keep_last <= 0 keeps all). One writer per run directory.
// Returns the step directory. The same as begin_save, write_part(tmp, 0, ...) and commit_save.
std::filesystem::path save(const std::filesystem::path& run_dir, int64_t step,
                           const std::vector<NamedTensor>& tensors, const nlohmann::json& metadata,
                           int keep_last);
// The same from an image of the tensors taken earlier (a background save's snapshot).
std::filesystem::path save(const std::filesystem::path& run_dir, int64_t step,
                           const DataImage& image, const nlohmann::json& metadata, int keep_last);

// A save written by several processes sharing the run directory, in three steps that the caller
// separates with barriers: one process calls begin_save, then each writes its own part, then one
// calls commit_save. Until commit_save succeeds the previous `latest` stays the valid checkpoint.

// Creates the run directory, removes leftovers of crashed saves and creates a fresh hidden
// directory for `step`, which it returns for write_part.
std::filesystem::path begin_save(const std::filesystem::path& run_dir, int64_t step);
// The directory begin_save creates, for the processes that write parts into it.
std::filesystem::path pending_step_dir(const std::filesystem::path& run_dir, int64_t step);

// Writes rank-<part, 5 digits>.bin with the tensors and rank-<part>.json listing them, both
// fsynced, into the directory from begin_save. Names must be unique across all parts.
void write_part(const std::filesystem::path& tmp_dir, int part,
                const std::vector<NamedTensor>& tensors);
void write_part(const std::filesystem::path& tmp_dir, int part, const DataImage& image);

// Merges the part listings of parts 0..parts-1 into manifest.json with `step` and `metadata`, then
// commits, installs, updates `latest` and prunes as save() does. A missing part or a tensor name
// in two parts is an error that commits nothing. Returns the step directory.
std::filesystem::path commit_save(const std::filesystem::path& run_dir, int64_t step, int parts,
                                  const nlohmann::json& metadata, int keep_last);

// Accepts a committed step directory, or a run directory: follows `latest`, or when that is
// missing or names an uncommitted directory, takes the newest committed step-* directory.
std::filesystem::path resolve(const std::filesystem::path& run_or_step_dir);

// A LoRA step's base model, the committed step its metadata names as "lora_base": by its folder
// name when it sits beside the step (so a run folder can move), else by its absolute path; none
// (null or absent) when the base is the run seed's initial model.
std::optional<std::filesystem::path> lora_base(const std::filesystem::path& step_dir,
                                               const nlohmann::json& metadata);
nlohmann::json lora_base_reference(const std::filesystem::path& base,
                                   const std::filesystem::path& checkpoints_dir);

// The checkpoint a run directory would resume from (as resolve() picks it), or nullopt when the
// directory does not exist or holds no committed step, so a fresh run can start from scratch.
std::optional<std::filesystem::path> find_latest(const std::filesystem::path& run_dir);

// Fills each view from the committed step directory, matching by name; shapes and dtypes must
// agree exactly. Every byte is checked against the manifest's crc32. On error the views may hold
// partial data.
void load(const std::filesystem::path& step_dir, const std::vector<NamedTensor>& tensors);

}  // namespace tessera::ckpt
