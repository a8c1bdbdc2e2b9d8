// The planner's model of one training run: memory per chip, step time and what follows from it
// (throughput, utilisation, days, cost), for a model config on an accelerator under a layout.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "tessera/model/flops.h"
#include "tessera/model/model_config.h"
#include "tessera/parallel/rank_memory.h"
#include "tessera/plan/collectives.h"
#include "tessera/plan/goodput.h"
#include "tessera/plan/hardware.h"
#include "tessera/plan/layout.h"

namespace tessera::plan {

// A run cannot fill all of HBM: the allocator, communication buffers and workspace take some.
inline constexpr double kUsableHbm = 0.92;

struct Workload {
  int64_t global_batch = 0;  // sequences per optimizer step
  int64_t seq_len = 0;
  double tokens = 0;  // tokens to train, for days and cost
  // Of parameters, gradients and activations; master weights and moments stay f32.
  model::Precision precision = model::Precision::kBf16;
  // Fused (flash) attention keeps the T x T scores on chip; without it every score is written to
  // and read from HBM several times per pass, as in the Megatron runs of 2021-2022.
  bool flash_attention = true;
  // ZeRO 2 and 3 collectives that overlap compute (FSDP's prefetched all-gathers and its
  // reduce-scatters during the backward, XLA's asynchronous collectives); the engine's do not.
  bool overlapped_sharding = false;
  // ZeRO 3 gathering every parameter tensor with a collective of its own, and gathering it again
  // for a recomputed forward, as DeepSpeed's ZeRO-3 of 2021 did (one torch.distributed.all_gather
  // per parameter in partition_parameters.py, parameters released after every forward); the
  // engine and FSDP gather a block at a time, for the forward and for the backward.
  bool gather_per_tensor = false;
  // Blocks keep what their backward reads (q/k/v, the residual after attention, the MLP's first
  // output, norm statistics) in the 2-byte compute precision, as Megatron-LM, MaxText and PyTorch
  // do; the engine keeps them in f32, and plans its own memory exactly.
  bool bf16_activations = false;
  Reliability reliability;  // failures and checkpoints, for days and cost
};

// The parameters one chip of a tensor- and expert-parallel layout holds, before pipeline stages
// and ZeRO divide them: the engine's local layout of tp rank 0 and ep rank 0, with its alignment
// and vocabulary padding, in the parts that ZeRO shards over dp and over dp / ep.
struct ChipParameters {
  double dense = 0, experts = 0;
};

// A model as the cost model evaluates it: its parameter split, and the engine's own layout and
// memory (parallel::MemoryModel) for each tensor- and expert-parallel shape, pipeline stage and
// micro-batch. A search evaluates thousands of layouts that share a few hundred of these, so
// each is computed once.
class PlannedModel {
 public:
  explicit PlannedModel(const model::ModelConfig& config);

  const model::ModelConfig& config() const { return config_; }
  const model::MatmulWeights& weights() const { return weights_; }
  double parameter_count() const { return parameter_count_; }
  double tensors_per_block() const { return tensors_per_block_; }  // weights and biases
  ChipParameters parameters(int64_t tp, int64_t ep);
  parallel::MemoryModel& memory() { return memory_; }

 private:
  model::ModelConfig config_;
  model::MatmulWeights weights_;
  double parameter_count_;
  double tensors_per_block_;
  std::map<std::pair<int64_t, int64_t>, ChipParameters> parameters_;
  parallel::MemoryModel memory_;
};

// The memory of the layout's fullest chip: the pipeline rank whose stages and micro-batches in
// flight hold the most.
using MemoryPerChip = parallel::RankMemory;

// The engine's terms for a layout: how each rank is built and trains (parallel::MemoryModel).
parallel::TrainingShape training_shape(const Layout& layout, const Workload& workload);

// Seconds per optimizer step on one chip. Communication that the engine does not overlap is
// added to compute; the data-parallel reduction of ZeRO 0 and 1 overlaps the last micro-batch's
// backward, as the engine's bucketed all-reduce does.
struct StepTime {
  double compute = 0, bubble = 0, tensor_parallel = 0, context_parallel = 0, pipeline_p2p = 0,
         expert_all_to_all = 0, data_parallel = 0, optimizer = 0;
  double total() const {
    return compute + bubble + tensor_parallel + context_parallel + pipeline_p2p +
           expert_all_to_all + data_parallel + optimizer;
  }
};

// Seconds per optimizer step each kind of collective takes, whether or not compute hides it.
struct CommunicationTime {
  double tensor_parallel = 0, context_parallel = 0, pipeline_p2p = 0, expert_all_to_all = 0,
         data_parallel = 0;
};

struct Estimate {
  Layout layout;
  std::string invalid;  // why the layout cannot run this model and batch; empty when it can
  MemoryPerChip memory;
  double usable_memory = 0;  // bytes of HBM a run can fill
  bool fits = false;
  StepTime time;  // what the step waits for: the exposed part of each collective
  CommunicationTime communication;
  // Ring or tree, for the data-parallel all-reduce where there is one.
  CollectiveAlgorithm data_parallel_algorithm = CollectiveAlgorithm::kRing;
  double matmul_efficiency = 0;  // fraction of peak the matmuls reach at this layout's shapes
  model::FlopsPerToken flops;
  double model_tflops_per_chip = 0, hardware_tflops_per_chip = 0, mfu = 0, hfu = 0;
  double tokens_per_s = 0;
  // Days to train the workload without failures, and with the expected failures' cost (goodput).
  double days_failure_free = 0, days = 0;
  Goodput goodput;
  // USD for the whole workload, failures included, at each published price.
  std::optional<double> cost_on_demand, cost_spot, cost_1y, cost_3y;
};

Estimate estimate(const model::ModelConfig& config, const Accelerator& accelerator,
                  const Layout& layout, const Workload& workload);
// The same for searches over many layouts, which share the model's memoised parts.
Estimate estimate(PlannedModel& planned, const Accelerator& accelerator, const Layout& layout,
                  const Workload& workload);

}  // namespace tessera::plan
