// How Tessera's parameters (model_layout.h) correspond to Hugging Face Transformers checkpoints
// of GPT2LMHeadModel, LlamaForCausalLM and MixtralForCausalLM, and how a model's config.json maps
// to a ModelConfig. This is the one place in the checkpoint layer that knows parameter names: the
// interchange format is defined by them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/model/model_config.h"
#include "tessera/model/model_layout.h"

namespace tessera::interop {

// One Hugging Face tensor and where its values live among Tessera's parameters: rows
// [row_begin, row_begin + rows) of the parameter viewed as a matrix whose rows are as wide as its
// last dimension (a vector is a column: one value per row). Splitting by rows is enough for every
// mapping: fused q/k/v, fused gate/up, and one expert out of the stacked experts.
struct HfTensor {
  std::string hf_name;
  std::vector<int64_t> hf_shape;
  std::string param;
  int64_t row_begin = 0;
  int64_t rows = 0;
  // Stored as [width, rows], the transpose of Tessera's [out, in] layout: GPT-2's Conv1D weights.
  bool transposed = false;
};

struct HfLayout {
  std::string architecture;  // "GPT2LMHeadModel", "LlamaForCausalLM" or "MixtralForCausalLM"
  std::vector<HfTensor> tensors;
  // With tied embeddings the output projection is not stored; a file may still hold it under
  // tied_head, which import accepts when it equals the embedding named tied_to.
  std::string tied_head;
  std::string tied_to;
};

// The Hugging Face tensors of a model, in the order of Tessera's layout. Throws tessera::Error for
// a model Transformers cannot represent (shared experts).
HfLayout hf_layout(const model::ModelConfig& config);

// Non-parameter buffers that some Hugging Face exports carry (GPT-2's causal masks, Llama's
// rotary frequency tables); import skips them.
bool is_hf_buffer(model::Architecture arch, std::string_view hf_name);

// Where a view of `rows` rows of a parameter starts in the flat parameter buffer, and its width.
struct HfSlice {
  int64_t offset = 0;  // in floats
  int64_t width = 0;
};
HfSlice hf_slice(const model::ModelLayout& layout, const HfTensor& tensor);

// config.json for the model: architectures, model_type, torch_dtype ("float32" or "bfloat16" from
// `dtype`) and every size and hyperparameter Transformers needs to rebuild it.
nlohmann::json hf_config_json(const model::ModelConfig& config, DType dtype);

// The ModelConfig a config.json describes. Fields Transformers defaults are defaulted the same
// way; anything Tessera cannot compute the same way (another activation, rope scaling, biases in
// Llama, sliding windows, ...) is an error naming `source` and the field.
model::ModelConfig model_config_from_hf(const nlohmann::json& config, const std::string& source);

}  // namespace tessera::interop
