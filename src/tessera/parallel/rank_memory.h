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

namespace tessera::parallel {

struct RankMemory {
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double total() const { return params + grads + optimizer + activations; }
};

// One rank's share of the model and of the schedule.
struct RankWork {
  // Its stages (one, or mesh.pp_virtual with interleaving): tp and ep coordinates and blocks.
  std::vector<model::Sharding> stages;
  // For each stage, the most micro-batches whose activations it holds at once: the slots its
  // model is built with (the pipeline simulator's stage_peak_in_flight; 1 without a pipeline).
  std::vector<int64_t> in_flight;
};

// The work of pipeline rank `rank` of `ranks` under a simulated schedule: its stages (below) and
// each one's peak of micro-batches in flight.
RankWork rank_work(const model::Sharding& sharding, std::span<const int64_t> boundaries,
                   int64_t ranks, int64_t rank, std::span<const int> stage_peak_in_flight);

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
  // For plans of other systems: the blocks' saved f32 state (model::ActivationBytes) kept in the
  // 2-byte compute precision instead, as Megatron-LM and PyTorch keep it; the engine never does.
  bool bf16_saved_state = false;
};

class MemoryModel {
 public:
  explicit MemoryModel(const model::ModelConfig& config);

  RankMemory rank(const RankWork& work, const TrainingShape& shape);

 private:
  // A stage of this shape on any of its tp and ep ranks, which all hold as much as the first
  // (the slices are equal, and the vocabulary is padded so that tp divides it): tp, ep, blocks,
  // with the embedding, with the head.
  using StageKey = std::tuple<int64_t, int64_t, int64_t, bool, bool>;
  struct Stage {
    model::ModelLayout layout;
    double dense = 0, experts = 0;  // parameters ZeRO shards over dp, and over dp / ep
  };
  using ActivationKey = std::tuple<StageKey, int64_t, int64_t, bool, model::Precision,
                                   model::Recompute, model::WeightFormat, bool, int, int64_t, bool>;
  std::pair<StageKey, const Stage*> stage(const model::Sharding& sharding);
  const model::ActivationBytes& activations(const model::Sharding& sharding,
                                            const model::ActivationOptions& o);

  model::ModelConfig config_;
  std::map<StageKey, Stage> stages_;
  std::map<ActivationKey, model::ActivationBytes> activations_;
};

}  // namespace tessera::parallel
