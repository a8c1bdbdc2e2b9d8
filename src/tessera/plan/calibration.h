// The planner's calibration: measure what this machine does with Tessera's own kernels, then
// predict the time of one training step from a count of the step's work. Measuring runs short
// kernel calls at the shapes the step uses; predicting is arithmetic over those rates and never
// runs the model.
//
// Modelled: training of GPT-2 and Llama models, dense or mixture-of-experts, on one rank's
// micro-batch, in f32, bf16 or f16 (train.precision: the Linear layers' gemms through gemm_low,
// their inputs and output gradients narrowed, the parameters read in f32 widened on every
// acquire, bf16 gradients narrowed), on the thread count in force, with the trainer's ZeRO
// stage 0 state (gradients zeroed, AdamW over every parameter), any recompute mode, and the
// data-parallel gradient all-reduce. A mixture of experts is priced as MoeLayer runs it, in f32
// whatever the precision: the router, each expert's gemms over an even share of the rows (capped
// at capacity), the shared experts, and the row copies of dispatch and combine. Not modelled: ZeRO
// stages above 0, tensor, pipeline and expert parallelism, the gradient norm and clipping the
// trainer adds to each step, and uneven routing.
#pragma once

#include <map>

#include "tessera/comm/communicator.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"
#include "tessera/plan/step_work.h"

namespace tessera::plan {

// Rates measured on this machine with the engine's own kernels at one model's step shapes, with
// the OpenMP thread count in force. Each comes from the fastest of several runs spread over the
// calibration: the machine's rate when nothing else competes for its cores.
struct MachineRates {
  int threads = 0;
  std::map<GemmShape, double> gemm_flops;  // FLOP/s of each shape step_gemms lists
  // Attention FLOP/s (counted as attention_flops does) at this sequence length and head size.
  int64_t attention_seq = 0, attention_head_dim = 0;
  double attention_forward_flops = 0, attention_backward_flops = 0;
  // Bytes/s of kernels::add over arrays larger than the caches. Between two uses of an
  // activation a step streams through so much else that the activation is back in DRAM, so the
  // streaming kernels (norms, residual adds, biases, embedding) move their bytes at this rate.
  double activation_bandwidth = 0;
  // Bytes/s of kernels::add over arrays that stay in cache, as they do in the repeated runs that
  // time the kernels above and below. In a step those kernels find their operands in DRAM
  // instead, so each pays its bytes x (1/activation_bandwidth - 1/cache_bandwidth) on top.
  double cache_bandwidth = 0;
  // Kernels that evaluate an exp, tanh or cos per element run below memory speed, so they have
  // rates of their own, in elements per second: the MLP activation (GELU or SwiGLU, per output
  // element), rotary embeddings (Llama; per token row), and the fused softmax cross-entropy
  // (per logit).
  double mlp_activation_forward_rate = 0, mlp_activation_backward_rate = 0;
  double rope_rate = 0;
  double loss_rate = 0;
  // Over arrays larger than the caches, where the step finds the optimizer state: bytes/s of
  // kernels::adamw_update, which reads parameter, gradient and both moments and writes all but
  // the gradient (28 bytes a parameter), and of the one-thread kernels::fill_zeros that clears
  // gradients.
  double parameter_bandwidth = 0;
  double zeroing_bandwidth = 0;
  // The format the step's linear layers multiply in; in bf16 or f16, the elements/s of
  // kernels::cast_to_low and cast_from_low in that format over arrays larger than the caches
  // (a step narrows activations that have left the cache and parameters that never fit it).
  model::Precision precision = model::Precision::kF32;
  double narrow_rate = 0, widen_rate = 0;
  // Bytes/s of one blocking all-reduce of a gradient bucket, in the format the parameter store
  // keeps gradients in (bf16 in a bf16 step, else f32), over the ranks measure_machine was given;
  // 0 with one rank.
  int ranks = 1;
  double allreduce_bandwidth = 0;
};

// Takes about a second of CPU time. Collective over `dp` when it has more than one rank.
MachineRates measure_machine(const model::ModelConfig& config, const StepShape& step,
                             comm::Communicator& dp);

// Seconds of one training step on one rank.
struct StepPrediction {
  double matmul_s = 0;         // gemms of every linear layer
  double attention_s = 0;      // attention forward and backward
  double memory_bound_s = 0;   // norms, activations, residual adds, embedding, loss, biases,
                               // a mixture of experts' routing and row traffic
  double casts_s = 0;          // low precision: activations narrowed, parameters widened
  double optimizer_s = 0;      // gradient zeroing and AdamW
  double communication_s = 0;  // the gradient all-reduce, as if backward hid none of it
  double total_s = 0;
};

StepPrediction predict_step(const model::ModelConfig& config, const StepShape& step,
                            const MachineRates& rates);

}  // namespace tessera::plan
