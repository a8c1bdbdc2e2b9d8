// The planner's calibration: measure what this machine does with Tessera's own kernels, then
// predict the time of one training step from a count of the step's work. Measuring runs a few
// short kernel calls at the shapes the step uses; predicting is arithmetic over those rates and
// never runs the model, so the same rates can price other layouts.
//
// Modelled: f32 training of dense GPT-2 and Llama models on one rank's micro-batch, with the
// trainer's ZeRO stage 0 state (gradients zeroed, AdamW over every parameter) and any recompute
// mode. bf16/f16 matmuls and mixture-of-experts blocks are not modelled.
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <string>

#include "tessera/dist/communicator.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"

namespace tessera::plan {

// One rank's share of a step: its micro-batch and how backward gets its activations.
struct StepShape {
  int64_t batch = 0, seq = 0;
  model::Recompute recompute = model::Recompute::kNone;
};

// One kernels::gemm call: C[m,n] = op(A)[m,k] * op(B)[k,n] (+ C when it accumulates).
struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;

  double flops() const { return 2.0 * double(m) * double(n) * double(k); }
  std::string name() const;  // "NT 4096x768x256 +C"
  auto operator<=>(const GemmShape&) const = default;
};

// Every gemm of a step outside attention (three per linear layer: forward, input gradient,
// weight gradient), each distinct shape once with the number of calls.
std::map<GemmShape, int64_t> step_gemms(const model::ModelConfig& config, const StepShape& step);

// Rates measured on this machine with the engine's own kernels, at one model's step shapes.
struct MachineRates {
  int threads = 0;
  // Bytes/s of kernels::add over three arrays the size of the parameters (capped): what AdamW
  // sees, from DRAM for large models and from cache for small ones.
  double parameter_bandwidth = 0;
  // Bytes/s of kernels::add over arrays the size of the largest activation [B*T, ffn]: what
  // the element-wise kernels see, whose inputs were often just written by the previous kernel.
  double activation_bandwidth = 0;
  // Bytes/s of one thread's std::fill over the parameters: how the trainer zeroes gradients.
  double fill_bandwidth = 0;
  std::map<GemmShape, double> gemm_flops;  // FLOP/s of each shape step_gemms lists
  // FLOP/s of attention_forward and attention_backward at the model's sequence length and
  // head size, counting the T x T square their matmuls compute (see attention_flops).
  int64_t attention_seq = 0, attention_head_dim = 0;
  double attention_forward_flops = 0, attention_backward_flops = 0;
  // Data parallelism: bytes/s of a blocking all-reduce of one gradient bucket over the ranks
  // measure_machine was given; 0 with one rank.
  int ranks = 1;
  double allreduce_bandwidth = 0;
};

// Collective over `dp` when it has more than one rank; takes well under two seconds.
MachineRates measure_machine(const model::ModelConfig& config, const StepShape& step,
                             dist::Communicator& dp);

// FLOPs of one attention_forward or attention_backward call over the batch. The kernels
// compute full T x T score matrices and zero the upper triangle, so causality saves nothing:
// forward is 2 matmuls (q k^T, P v), backward 5 (q k^T again, dO v^T, dq, dk, dv).
double attention_flops(const model::ModelConfig& config, const StepShape& step, bool backward);

// Seconds of one training step on one rank.
struct StepPrediction {
  double matmul_s = 0;         // gemms of every linear layer
  double attention_s = 0;      // attention forward and backward
  double memory_bound_s = 0;   // norms, activations, residual adds, embedding, loss, bias grads
  double optimizer_s = 0;      // gradient zeroing and AdamW
  double communication_s = 0;  // the gradient all-reduce, counted as if backward hid none of it
  double total_s = 0;
};

StepPrediction predict_step(const model::ModelConfig& config, const StepShape& step,
                            const MachineRates& rates);

}  // namespace tessera::plan
