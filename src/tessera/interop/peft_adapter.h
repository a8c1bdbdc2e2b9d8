// LoRA adapters as Hugging Face PEFT keeps them: a folder of adapter_config.json and
// adapter_model.safetensors, each adapted module's lora_A [r, in] and lora_B [out, r] named after
// the module ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"). Tessera's adapter
// of a fused part (qkv, gate and up) is one PEFT adapter per module it fuses.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "tessera/model/model_config.h"

namespace tessera::interop {

inline constexpr const char* kPeftConfigFile = "adapter_config.json";
inline constexpr const char* kPeftWeightsFile = "adapter_model.safetensors";

// Writes the adapters of `config` (config.lora enabled) from `params`, the flat buffer
// model_layout(config) describes, into `dir` (created if needed). base_model names the base model
// in adapter_config.json.
void export_peft(const model::ModelConfig& config, std::span<const float> params,
                 const std::filesystem::path& dir, const std::string& base_model);

// What an adapter_config.json says for a base model: the base's config with its lora settings,
// and the module names target_modules lists. Throws naming the file (`source`) and the key for
// anything Tessera does not compute (DoRA, rsLoRA, per-module ranks, biases, ...).
struct PeftSettings {
  model::ModelConfig config;
  std::set<std::string> targets;
  // Whether PEFT adapts `module` (a module's path inside a block, "self_attn.q_proj"): a target
  // names it whole or by the end of its path, as PEFT matches them.
  bool adapts(const std::string& module) const;
};
PeftSettings peft_settings(const nlohmann::json& config, const model::ModelConfig& base,
                           const std::string& source);

// A PEFT LoRA folder read for a base model: the adapters' settings and their values, the range
// [adapters_begin, total) of model_layout(config). Modules PEFT adapts that Tessera fuses with
// others it does not adapt get zero adapters beside them. Anything else PEFT can describe but
// Tessera does not compute (DoRA, rsLoRA, per-module ranks, biases, a module Tessera has no
// adapter for) is an error naming the file and the key or tensor.
struct PeftImport {
  model::ModelConfig config;  // the base's, with lora set
  std::vector<float> adapters;
};
PeftImport import_peft(const std::filesystem::path& dir, const model::ModelConfig& base);

}  // namespace tessera::interop
