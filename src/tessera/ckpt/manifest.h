// The checkpoint layer: step directories on disk (a manifest, one data file per rank, a commit
// marker) and the code that writes, finds and reads them. It sees tensors only as named views of
// memory; it must never know about models, optimizers or the training loop that owns them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::ckpt {

inline constexpr const char* kFormatName = "tessera-checkpoint";
// Version 2 added manifest_crc32; version 1 manifests are refused, since nothing in them can be
// told apart from corruption.
inline constexpr int kFormatVersion = 2;
inline constexpr const char* kManifestFile = "manifest.json";
// The field holding the manifest's own checksum, manifest_checksum() of the rest of it.
inline constexpr const char* kManifestChecksumKey = "manifest_crc32";

// The parsed manifest.json of one step directory.
struct Manifest {
  int64_t step = 0;
  int64_t world_size = 1;  // processes that wrote the step, one data file each
  nlohmann::json metadata;
  struct Entry {
    std::string name;
    Shape shape;
    DType dtype = DType::f32;
    std::string file;  // a plain file name inside the step directory
    uint64_t offset = 0;
    uint64_t nbytes = 0;
    uint32_t crc32 = 0;
  };
  std::vector<Entry> tensors;
};

// The JSON of the manifest, with its kManifestChecksumKey.
nlohmann::json manifest_to_json(const Manifest& manifest);

// crc32 of the compact dump (keys sorted, as nlohmann::json keeps them) of `json` without its
// kManifestChecksumKey: the dump is the same text whatever whitespace the file was written with.
uint32_t manifest_checksum(const nlohmann::json& json);

// Checks the format, the version and the manifest's own checksum before anything else in it is
// used, then validates the structure and every field's type, naming `source` and the field in
// the error: a manifest is outside input, so nothing in it is trusted (file names cannot leave
// the step directory, byte counts must agree with shape and dtype, names are unique).
Manifest parse_manifest(const nlohmann::json& json, const std::string& source);

// Reads and validates <step_dir>/manifest.json; when the directory is named step-N, the
// manifest's step must be N. Does not require the COMMIT marker, so tools can inspect an
// incomplete step; load() does require it.
Manifest read_manifest(const std::filesystem::path& step_dir);

// "step-000123" for 123, and back; nullopt for a name of any other form.
std::string step_dir_name(int64_t step);
std::optional<int64_t> parse_step_dir_name(const std::string& name);

}  // namespace tessera::ckpt
