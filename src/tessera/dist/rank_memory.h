// What one rank of a training run holds: the model state of its pipeline stages (several with
// interleaving) as ZeRO shards it over the ranks that replicate it, and the activations of the
// micro-batches its schedule keeps in flight. The dry run and the planner count with this one
// model, and it counts what the engine allocates: the stages' layouts (model_layout) and
// activation arenas (activation_bytes) and ZeRO's shards (zero_model_state).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <vector>

#include "tessera/model/activation_memory.h"
#include "tessera/model/model_config.h"
#include "tessera/model/model_layout.h"

namespace tessera::dist {

struct RankMemory {
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return params + grads + optimizer + activations; }
};

// One rank's share of the model and of the schedule.
struct RankWork {
  // Its stages (one, or mesh.pp_virtual with interleaving): tp and ep coordinates and blocks.
  std::vector<model::Sharding> stages;
  // The most micro-batches, over all its stages, whose activations it holds at once (the
  // pipeline simulator's peak_in_flight; 1 without a pipeline).
  int64_t in_flight = 1;
};

// The stages pipeline rank `rank` of `ranks` holds (stage rank + k ranks, interleaved), their
// blocks from the split's boundaries (stage_boundaries), with the tp and ep coordinates of
// `sharding`.
std::vector<model::Sharding> rank_stages(const model::Sharding& sharding,
                                         std::span<const int64_t> boundaries, int64_t ranks,
                                         int64_t rank);

// How the run trains: ZeRO over the data-parallel ranks (expert state over dp / ep of them) and
// how each stage is built (micro-batch, precision, recomputation, sequence parallelism).
struct TrainingShape {
  int zero = 0;
  int64_t dp = 1;
  model::ActivationOptions activations;
};

class MemoryModel {
 public:
  explicit MemoryModel(const model::ModelConfig& config);

  const model::ModelConfig& config() const { return config_; }
  RankMemory rank(const RankWork& work, const TrainingShape& shape);

 private:
  // What a stage of this shape holds on any of its tp and ep ranks.
  struct StageCounts {
    double dense = 0, experts = 0;  // parameters ZeRO shards over dp, and over dp / ep
    model::ActivationBytes activations;
  };
  // tp, ep, blocks, with embedding, with head, then the activation options.
  using StageKey =
      std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, bool, model::Precision,
                 model::Recompute, model::WeightFormat, bool, int, int64_t>;
  const StageCounts& stage(const model::Sharding& sharding, const model::ActivationOptions& o);

  model::ModelConfig config_;
  std::map<StageKey, StageCounts> stages_;
};

}  // namespace tessera::dist
