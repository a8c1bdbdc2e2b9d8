// Reads GGUF (versions 2 and 3), the single-file model format of llama.cpp and ggml: "GGUF", the
// version, the tensor and metadata counts, typed key-value metadata, each tensor's name, shape
// (ggml's innermost-first order), type and offset, then the data from the next multiple of
// general.alignment (32 unless set). Files come from outside, so nothing in them is trusted:
// every count, length, shape and offset is checked against the file's size before it is used.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "tessera/core/mapped_file.h"
#include "tessera/interop/ggml_types.h"

namespace tessera::interop {

// A metadata value: integers (any width, signed or not, and bools) as int64, floats as double;
// arrays of them, and of strings, as vectors. Nested arrays are refused.
using GgufValue = std::variant<int64_t, double, std::string, std::vector<int64_t>,
                               std::vector<double>, std::vector<std::string>>;

struct GgufTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major, outermost first (ggml's dimensions reversed)
  GgmlType type;
  uint64_t offset = 0, bytes = 0;  // within the data section

  int64_t numel() const;
};

struct GgufHeader {
  uint32_t version = 0;
  std::map<std::string, GgufValue> metadata;
  std::vector<GgufTensor> tensors;  // in the file's order
  uint64_t data_start = 0;          // where the data section begins in the file
};

// Validates the file's structure: the magic and version; the counts against the bytes left;
// every string, array, key and tensor name (unique); each tensor's dimensions (1 to 4, positive,
// rows a whole number of its type's blocks), type (one ggml_types.h reads) and data (aligned,
// inside the file, not overlapping another's). Throws tessera::Error naming `source` and what is
// wrong.
GgufHeader parse_gguf(std::span<const uint8_t> file, const std::string& source);

// A validated GGUF file, memory-mapped so that tensors are read one at a time.
class GgufFile {
 public:
  explicit GgufFile(const std::filesystem::path& path);
  // Over `bytes`, which the caller keeps alive, named `source` in errors.
  GgufFile(std::span<const uint8_t> bytes, std::string source);

  const std::string& source() const { return source_; }
  const GgufHeader& header() const { return header_; }
  // The tensor called `name`, or null.
  const GgufTensor* find(const std::string& name) const;
  // Its bytes as the file encodes them, and its values as f32, row-major.
  std::span<const uint8_t> encoded(const GgufTensor& tensor) const;
  std::vector<float> read(const GgufTensor& tensor) const;

  // Metadata, each getter naming the key and the file when it is missing or of another type.
  bool has(const std::string& key) const { return header_.metadata.count(key) > 0; }
  int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;  // a float, or an integer
  const std::string& text(const std::string& key) const;
  const std::vector<std::string>& texts(const std::string& key) const;
  const std::vector<int64_t>& integers(const std::string& key) const;

 private:
  template <typename T>
  const T& value(const std::string& key, const char* kind) const;

  std::string source_;
  std::optional<MappedFile> mapped_;
  std::span<const uint8_t> bytes_;
  GgufHeader header_;
};

}  // namespace tessera::interop
