// Moves a model's parameters between Tessera's flat parameter buffer and a Hugging Face model
// folder (config.json + model.safetensors), with the names and layouts of hf_names.h.
#pragma once

#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/model/model_config.h"

namespace tessera::interop {

inline constexpr const char* kHfWeightsFile = "model.safetensors";
inline constexpr const char* kHfIndexFile = "model.safetensors.index.json";
inline constexpr const char* kHfConfigFile = "config.json";

// Whether `dir` holds a Hugging Face model: config.json and model.safetensors or its index.
bool is_hf_model_folder(const std::filesystem::path& dir);

// Writes <dir>/model.safetensors (f32 or bf16) and <dir>/config.json from `params`, the flat
// buffer model_layout(config) describes. Creates `dir` if needed. Returns the Transformers
// architecture written, e.g. "GPT2LMHeadModel".
std::string export_hf(const model::ModelConfig& config, std::span<const float> params,
                      const std::filesystem::path& dir, DType dtype);

// The model <dir>/config.json describes (model_config_from_hf), without reading any weights.
model::ModelConfig read_hf_model_config(const std::filesystem::path& dir);

struct HfImport {
  model::ModelConfig config;
  std::string architecture;   // as hf_layout names it, e.g. "LlamaForCausalLM"
  std::vector<float> params;  // the flat buffer model_layout(config) describes
};

// Reads <dir>/config.json and the weights: model.safetensors, or the shards a
// model.safetensors.index.json lists. Every parameter must be present with the shape config.json
// implies; any other tensor is an error (except known non-parameter buffers and a tied lm_head
// equal to the embedding). Errors name the file and the tensor.
HfImport import_hf(const std::filesystem::path& dir);

}  // namespace tessera::interop
