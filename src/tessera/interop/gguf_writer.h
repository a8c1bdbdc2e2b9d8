// Writes GGUF (version 3), the single-file model format of llama.cpp and ggml: typed key-value
// metadata, then tensors stored as f32, f16 or q8_0 (blocks of 32 int8 values with one f16
// scale). The writer knows the container only; which keys and tensor names a model needs is
// decided by its callers (ckpt/gguf_export.h for weights, data/gguf_tokenizer.h for vocabularies).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "tessera/core/q8_0.h"
#include "tessera/interop/ggml_types.h"

namespace tessera::interop {

class GgufWriter {
 public:
  using Value = std::variant<uint32_t, int32_t, float, bool, std::string, std::vector<std::string>,
                             std::vector<int32_t>>;
  // Fills the tensor's values, row-major in `shape`'s order, as f32; the writer encodes them.
  using Fill = std::function<void(std::span<float>)>;

  // Adds a metadata key; a key set twice is an error.
  void set(const std::string& key, Value value);
  // Adds a tensor. `shape` is row-major (outermost first, as Tessera and PyTorch write it); the
  // file stores ggml's reverse order. `type` is f32, f16 or q8_0; a q8_0 tensor's rows must be a
  // multiple of 32 wide.
  void add_tensor(const std::string& name, std::vector<int64_t> shape, GgmlType type, Fill fill);

  // Writes the file beside `path` and renames it over `path` when complete, so a failed write
  // leaves any earlier file in place.
  void write(const std::filesystem::path& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    GgmlType type;
    Fill fill;
  };
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace tessera::interop
