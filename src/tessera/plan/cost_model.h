// The planner's model of one training run: memory per chip, step time and what follows from it
// (throughput, utilisation, days, cost), for a model config on an accelerator under a layout.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tessera/model/model_config.h"
#include "tessera/plan/hardware.h"
#include "tessera/plan/layout.h"

namespace tessera::plan {

struct Workload {
  int64_t global_batch = 0;  // sequences per optimizer step
  int64_t seq_len = 0;
  double tokens = 0;  // tokens to train, for days and cost
};

// The model's parameters as the cost model needs them, from the engine's own layout.
struct ParameterSplit {
  double blocks_matmul = 0;       // matmul weights of the blocks a token passes through
  double head_matmul = 0;         // the output projection
  double dense = 0, experts = 0;  // all parameters, without and within routed experts
};
ParameterSplit split_parameters(const model::ModelConfig& config);

// FLOPs per trained token. The model count is 6 x (matmul parameters a token passes through) +
// 12 x layers x sequence x attention width, counting the full attention matrix as Megatron and
// PaLM do; the hardware count adds what recomputation runs again.
struct FlopsPerToken {
  double model = 0, hardware = 0;
};
FlopsPerToken flops_per_token(const model::ModelConfig& config, int64_t seq_len,
                              model::Recompute recompute);
FlopsPerToken flops_per_token(const model::ModelConfig& config, const ParameterSplit& split,
                              int64_t seq_len, model::Recompute recompute);

struct MemoryPerChip {
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return params + grads + optimizer + activations; }
};

// Seconds per optimizer step on one chip. Communication that the engine does not overlap is
// added to compute; the data-parallel reduction of ZeRO 0 and 1 overlaps the last micro-batch's
// backward, as the engine's bucketed all-reduce does.
struct StepTime {
  double compute = 0, bubble = 0, tensor_parallel = 0, pipeline_p2p = 0, expert_all_to_all = 0,
         data_parallel = 0, optimizer = 0;
  double total() const {
    return compute + bubble + tensor_parallel + pipeline_p2p + expert_all_to_all + data_parallel +
           optimizer;
  }
};

struct Estimate {
  Layout layout;
  std::string invalid;  // why the layout cannot run this model and batch; empty when it can
  MemoryPerChip memory;
  double usable_memory = 0;  // bytes of HBM a run can fill
  bool fits = false;
  StepTime time;
  double matmul_efficiency = 0;  // fraction of peak the matmuls reach at this layout's shapes
  FlopsPerToken flops;
  double model_tflops_per_chip = 0, hardware_tflops_per_chip = 0, mfu = 0, hfu = 0;
  double tokens_per_s = 0, days = 0;
  // USD for the whole workload at each published price.
  std::optional<double> cost_on_demand, cost_spot, cost_1y, cost_3y;
};

Estimate estimate(const model::ModelConfig& config, const Accelerator& accelerator,
                  const Layout& layout, const Workload& workload);
// The same with the split computed once, for searches over many layouts.
Estimate estimate(const model::ModelConfig& config, const ParameterSplit& split,
                  const Accelerator& accelerator, const Layout& layout, const Workload& workload);

}  // namespace tessera::plan
