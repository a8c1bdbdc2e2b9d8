#pragma once

#include <span>
#include <vector>

#include "tessera/model/model_config.h"

namespace tessera::model {

// A model with LoRA adapters as the plain model it computes: each adapted weight becomes
// W + lora_alpha / rank * B_j A_j, piece by piece, and the adapters are dropped.
struct MergedModel {
  ModelConfig config;         // the adapted model's, without lora
  std::vector<float> params;  // the flat buffer model_layout(config) describes
};
// params: the flat buffer model_layout(adapted) describes (one rank, unsharded).
MergedModel merge_lora(const ModelConfig& adapted, std::span<const float> params);

}  // namespace tessera::model
