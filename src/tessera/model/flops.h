// FLOPs per trained token, the one count that the planner's step time and a training run's MFU
// both divide by a peak.
#pragma once

#include <cstdint>

#include "tessera/model/block_spec.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// The model count is 6 x (matmul weights a token passes through: matmul_weights) + 12 x layers x
// sequence x attention width, counting the full attention matrix as Megatron and PaLM do; with
// LoRA, 4 x the frozen weights (no weight gradients) + 6 x the adapters'. The hardware count adds
// what recomputation runs again.
struct FlopsPerToken {
  double model = 0, hardware = 0;
};
FlopsPerToken flops_per_token(const ModelConfig& config, int64_t seq_len, Recompute recompute);
// The same from the model's matmul_weights, already computed.
FlopsPerToken flops_per_token(const ModelConfig& config, const MatmulWeights& weights,
                              int64_t seq_len, Recompute recompute);

}  // namespace tessera::model
