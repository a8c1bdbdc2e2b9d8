// What a model served for inference holds and reads, counted from the layout it is built with,
// as the engine allocates it: the server's startup log and `tessera plan --serve` both count with
// these functions, so a plan's memory is the server's.
#pragma once

#include <cstdint>

#include "tessera/kernels/paged_attention.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// The serving engine's defaults: sequences batched together, tokens one model step runs (every
// running decode, then prompt chunks), and tokens per block of the paged KV cache.
inline constexpr int64_t kDefaultMaxRunning = 64;
inline constexpr int64_t kDefaultMaxStepTokens = 256;
inline constexpr int64_t kDefaultKvBlockTokens = 16;

// The KV cache's rows for the layout's blocks: each cached token has a key row and a value row of
// its kv heads (those of this tensor-parallel rank) in every block, in f32.
struct KvRows {
  int64_t layers = 0, row_width = 0;
  // A token's keys and values in every layer, held as `dtype`.
  int64_t bytes_per_token(kernels::KvDtype dtype = kernels::KvDtype::kF32) const {
    return 2 * layers * kernels::kv_row_bytes(dtype, row_width);
  }
};
KvRows kv_rows(const ModelLayout& layout);

// The batch the inference model is built for so that one step's chunks of up to max_step_tokens
// tokens fit, and at least one full context.
int64_t inference_max_batch(const ModelConfig& config, int64_t max_step_tokens);

// Bytes of the parameters an inference model of this layout keeps: all of them in f32, their
// low-precision copy when it multiplies in bf16 or f16, and with quantised weights every linear
// matrix (linear_weight_offsets) in int8 or q4_0 with its scales (QuantizedWeights).
int64_t resident_weight_bytes(const ModelLayout& layout, Precision precision, WeightFormat weights);

// Bytes of weight matrices the layout's matmuls read: the dense ones (attention, dense MLPs, the
// head, a mixture's router and shared expert) in the format they are multiplied in, and the
// routed experts' stacks (the mixture multiplies in f32), of which each token reads its
// `expert_token_share` (top_k / experts).
struct MatmulWeightReads {
  double dense = 0, experts = 0, expert_token_share = 0;
  double per_token() const { return dense + experts * expert_token_share; }
  // A step of `tokens` tokens reads the dense matrices once and every expert some token routes
  // to, as many as tokens routed evenly at random reach.
  double per_step(double tokens) const;
};
MatmulWeightReads matmul_weight_reads(const ModelLayout& layout, Precision precision,
                                      WeightFormat weights);

}  // namespace tessera::model
