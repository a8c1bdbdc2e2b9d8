// What one training step of Tessera does on one rank, counted from the description the engine
// builds its layers from (block_spec, model_layout): its gemms, its attention calls, the elements
// its streaming kernels and casts move, and what the parameter store and the optimizer do over the
// parameters. Calibration prices these counts at the rates it measures; nothing here runs a kernel.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"

namespace tessera::plan {

// Bytes of an f32 value, as the byte counts of steps and kernels multiply it.
inline constexpr double kFloatBytes = sizeof(float);

// One rank's share of a step: its micro-batch, how backward gets its activations, and the format
// its linear layers multiply in (train.precision; model/execution.h says what each keeps).
struct StepShape {
  int64_t batch = 0, seq = 0;
  model::Recompute recompute = model::Recompute::kNone;
  model::Precision precision = model::Precision::kF32;
};

// One gemm call: C[m,n] = op(A)[m,k] * op(B)[k,n] (+ C when it accumulates), with f32 operands
// (kernels::gemm) or bf16 / f16 ones (kernels::gemm_low); C is f32 either way.
struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;
  model::Precision operands = model::Precision::kF32;

  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
  std::string name() const;  // "NT 4096x768x256 +C bf16"
  auto operator<=>(const GemmShape&) const = default;
};

// Every gemm of a step outside attention, each distinct shape once with its number of calls: three
// per linear layer (forward, input gradient, weight gradient), in the step's precision, and a
// mixture of experts' (router, each expert over the rows it receives, shared experts) in f32,
// as MoeLayer computes whatever the precision.
std::map<GemmShape, int64_t> step_gemms(const model::ModelConfig& config, const StepShape& step);

// FLOPs of one attention_forward or attention_backward call. The kernels compute full T x T
// score matrices and zero the upper triangle, so causality saves nothing: forward is 2 matmuls
// (q k^T, P v), backward 5 (q k^T again, dO v^T, dq, dk, dv).
double attention_flops(const model::ModelConfig& config, const StepShape& step, bool backward);

// Rows each expert's gemms take in a step of N tokens: the N top_k assignments shared as evenly
// as whole rows allow (`experts` of them take `rows` each), each expert capped at the layer's
// capacity when it has a capacity factor (it is dropless without). Routing from trained or freshly
// initialised weights spreads tokens less evenly, but the rows still sum to N top_k less what
// capacity drops, and a gemm's time follows its rows.
struct ExpertRows {
  int64_t rows = 0, experts = 0;
};
std::vector<ExpertRows> expert_rows(const model::ModelConfig& config, int64_t N);

// The rest of the step, in elements, each count under the rate that prices it. The kernels
// priced at measured rates of their own are timed on data in cache; `*_moved` counts what those
// calls read plus write, which a step fetches from DRAM instead.
struct StepElements {
  // f32 elements the streaming kernels read plus write: norms, residual adds, biases, the
  // embedding, the residual gradient cleared before backward, and a mixture of experts' row
  // copies, combine and router statistics.
  double streamed = 0;
  // MLP activations (GELU or SwiGLU, dense MLPs and experts alike), per output element.
  double activation_forward = 0, activation_forward_moved = 0;
  double activation_backward = 0, activation_backward_moved = 0;
  // Rotary embeddings (Llama), per token row turned.
  double rope_rows = 0, rope_moved = 0;
  // The fused softmax cross-entropy, per logit, and a mixture of experts' router softmax and
  // top-k, per router probability.
  double logits = 0, router_probabilities = 0;
  // Low precision: elements narrowed by cast_to_low and widened by cast_from_low, activations,
  // parameters and bf16 gradients together.
  double narrowed = 0, widened = 0;
  // Bytes of gradients cleared, and parameters AdamW updates.
  double zeroed_bytes = 0, updated_parameters = 0;
};

StepElements step_elements(const model::ModelConfig& config, const StepShape& step);

// Throws unless the step-time model covers the step: one the engine runs, at a length the model
// takes.
void check_modelled(const model::ModelConfig& config, const StepShape& step);

}  // namespace tessera::plan
