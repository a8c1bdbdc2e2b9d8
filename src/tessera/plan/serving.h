// `tessera plan --serve`: the layouts that serve a model on an accelerator. Each replica is a
// tensor- x pipeline-parallel split of the model; for its fullest chip the plan counts the memory
// the engine allocates (its parameters, one step's activations, and the paged KV cache in what is
// left, with model/serving_memory.h, the functions the server allocates with), how many sequences
// of the context fit, and the decode speed each chip reaches from the bytes a step reads at the
// HBM bandwidth and the FLOPs it does at the chip's matmul rate; then the time to a first token
// and the cost of a million generated tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"
#include "tessera/model/serving_memory.h"
#include "tessera/plan/hardware.h"

namespace tessera::plan {

struct ServingWorkload {
  int64_t context = 0;        // tokens a sequence may reach; the cache keeps room for all of them
  int64_t prompt_tokens = 0;  // of each request
  int64_t output_tokens = 256;
  model::Precision precision = model::Precision::kBf16;
  model::WeightFormat weights = model::WeightFormat::kDense;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;  // how the KV cache holds keys and values
  int64_t max_running = model::kDefaultMaxRunning;     // sequences a replica decodes together
  int64_t max_step_tokens = model::kDefaultMaxStepTokens;
  double itl_bound_s = 0;          // the longest time between two tokens; 0: none
  double ttft_bound_s = 0;         // the longest time to a first token; 0: none
  double target_tokens_per_s = 0;  // generated tokens/s of the whole deployment; 0: none
};

// One chip's memory, in bytes, as the engine allocates it on tp rank 0 of a pipeline stage.
struct ServingMemory {
  double weights = 0, activations = 0, kv_per_token = 0;
  double usable = 0;  // of its HBM
  double kv() const { return usable - weights - activations; }
  int64_t kv_tokens() const { return kv() > 0 ? int64_t(kv() / kv_per_token) : 0; }
};

// The memory of tp rank 0 of pipeline stage `stage` of `pp` (blocks split evenly, the first stage
// taking the embedding and the last the head), with `attention_threads` threads keeping attention
// scratch (the CPU's OpenMP threads; one on an accelerator).
ServingMemory serving_memory(const model::ModelConfig& config, int64_t tp, int64_t pp,
                             int64_t stage, const ServingWorkload& workload, int attention_threads,
                             double usable_bytes);

struct ServingEstimate {
  int64_t tp = 1, pp = 1, replicas = 1;
  std::string invalid;    // why the layout cannot serve the workload; empty when it can
  ServingMemory memory;   // of the chip whose KV cache holds the fewest tokens
  int64_t sequences = 0;  // of the full context, in one replica's cache
  int64_t batch = 0;      // sequences a replica decodes together
  // One decode step of the busiest pipeline stage over batch / pp sequences: its bytes at the
  // HBM bandwidth, its FLOPs at the matmul rate, and its tensor-parallel all-reduces.
  double read_s = 0, compute_s = 0, tensor_parallel_s = 0;
  double itl_s = 0, ttft_s = 0;
  double tokens_per_s = 0;  // generated, by every replica together
  std::optional<double> usd_per_million_on_demand, usd_per_million_spot, usd_per_million_1y,
      usd_per_million_3y;
  int64_t chips() const { return tp * pp * replicas; }
  std::string layout() const;  // "tp=8 pp=1 x 2"
};

// The layout tp x pp, `replicas` times (0: as many as --target-tokens-per-s needs, else one).
ServingEstimate estimate_serving(const model::ModelConfig& config, const Accelerator& accelerator,
                                 int64_t tp, int64_t pp, int64_t replicas,
                                 const ServingWorkload& workload);

// Every tp (dividing the heads, within the scale-up domain) and pp (up to one stage per layer)
// whose replicas fill `chips` (0: one replica each, or as many as the target needs), best first:
// most generated tokens/s per chip, so the least cost per token. Layouts that cannot serve are
// left out; when none can, the first is the reason.
struct ServingSearch {
  std::vector<ServingEstimate> ranked;
  std::optional<ServingEstimate> best_misfit;  // the one closest to fitting, when none fits
};
ServingSearch search_serving(const model::ModelConfig& config, const Accelerator& accelerator,
                             int64_t chips, const ServingWorkload& workload);

}  // namespace tessera::plan
