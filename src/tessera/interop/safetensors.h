// The safetensors format (Hugging Face's plain tensor container): an 8-byte little-endian header
// length N, N bytes of JSON header {"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {string: string}}, then the raw little-endian data, offsets counted from its
// start. Files come from outside, so the reader trusts nothing in them.
//
// Files Tessera writes also carry each tensor's crc32 in __metadata__["tessera.crc32"], a compact
// JSON object of tensor name -> 8 lowercase hex digits, so a byte changed after export is refused
// on import; files from other tools have no such entry and are read as before.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/mapped_file.h"

namespace tessera::interop {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as spelled in the file: "F32", "BF16", "F16", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section

  int64_t numel() const;
};

inline constexpr const char* kSafetensorsDigestsKey = "tessera.crc32";

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  std::map<std::string, uint32_t> digests;  // crc32 by tensor name, from kSafetensorsDigestsKey
  uint64_t data_start = 0;  // 8 + N: where offset 0 of the data section lies in the file
};

// Validates the whole file's structure: the header length against the file size, the JSON, every
// entry's dtype (one the format defines), shape and offsets (span = numel x element size), unique
// names, that the tensors tile the data section exactly, without gaps or overlaps, and that any
// digests name tensors of the file. Throws tessera::Error naming `source` and the tensor at fault.
SafetensorsHeader parse_safetensors(std::span<const uint8_t> file, const std::string& source);

// Converts the entry's bytes (the data section of the file it came from) to f32. Reads F32,
// F64, BF16 and F16; any other dtype is an error naming the tensor.
void convert_to_f32(const SafetensorsEntry& entry, std::span<const uint8_t> data_section,
                    std::span<float> out, const std::string& source);

// A validated safetensors file, memory-mapped so that tensors are paged in one at a time.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);

  const std::string& source() const { return source_; }
  const SafetensorsHeader& header() const { return header_; }
  const SafetensorsEntry* find(std::string_view name) const;
  // Checks the tensor's bytes against its digest, where the file has one, then converts them.
  void read_f32(const SafetensorsEntry& entry, std::span<float> out) const;

 private:
  std::string source_;
  MappedFile file_;
  SafetensorsHeader header_;
};

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  // Produces the values in row-major order, called once while writing, so a converter never
  // holds more than one tensor's copy in memory.
  std::function<void(std::span<float>)> fill;
};

// Writes the tensors in the given order as F32 or BF16 (rounded to nearest even), with the header
// padded with spaces to a multiple of 8 bytes so every tensor starts aligned to its element size,
// and every tensor's digest added to `metadata`. The file appears complete or not at all: it is
// written beside `path` and renamed into place.
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<SafetensorsTensor>& tensors, DType dtype,
                       const std::map<std::string, std::string>& metadata);

}  // namespace tessera::interop
