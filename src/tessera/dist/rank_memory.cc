#include "tessera/dist/rank_memory.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/dist/zero_memory.h"

namespace tessera::dist {

std::vector<model::Sharding> rank_stages(const model::Sharding& sharding,
                                         std::span<const int64_t> boundaries, int64_t ranks,
                                         int64_t rank) {
  std::vector<model::Sharding> stages;
  for (int64_t s = rank; s + 1 < int64_t(boundaries.size()); s += ranks) {
    model::Sharding stage = sharding;
    stage.block_begin = boundaries[s];
    stage.block_end = boundaries[s + 1];
    stages.push_back(stage);
  }
  return stages;
}

MemoryModel::MemoryModel(const model::ModelConfig& config) : config_(config) {}

const MemoryModel::StageCounts& MemoryModel::stage(const model::Sharding& s,
                                                   const model::ActivationOptions& o) {
  const int64_t end = s.block_end < 0 ? config_.n_layer : s.block_end;
  const StageKey key{s.tp,
                     s.ep,
                     end - s.block_begin,
                     s.block_begin == 0,
                     end == config_.n_layer,
                     o.max_batch,
                     o.max_seq,
                     o.training,
                     o.precision,
                     o.recompute,
                     o.weights,
                     o.sequence_parallel,
                     o.threads,
                     o.batch_ranks};
  const auto [it, added] = stages_.try_emplace(key);
  if (added) {
    // Every tp and ep rank of a stage holds as much as the first: the slices are equal and the
    // vocabulary is padded so that tp divides it.
    const model::Sharding first{
        .tp = s.tp, .ep = s.ep, .block_begin = s.block_begin, .block_end = end};
    const model::ModelLayout layout = model::model_layout(config_, first);
    it->second.dense = double(layout.experts_begin);
    it->second.experts = double(layout.params.total() - layout.experts_begin);
    it->second.activations = model::activation_bytes(config_, first, o);
  }
  return it->second;
}

RankMemory MemoryModel::rank(const RankWork& work, const TrainingShape& shape) {
  check(!work.stages.empty() && work.in_flight >= 1,
        "a rank needs at least one stage and one micro-batch in flight");
  const model::Precision precision = shape.activations.precision;
  RankMemory m;
  double activations = 0, per_micro_batch = 0;
  for (const model::Sharding& s : work.stages) {
    const StageCounts& c = stage(s, shape.activations);
    const ZeroBytes dense = zero_model_state(shape.zero, precision, c.dense, shape.dp);
    const ZeroBytes experts = zero_model_state(shape.zero, precision, c.experts, shape.dp / s.ep);
    m.params += dense.params + experts.params;
    m.grads += dense.grads + experts.grads;
    m.optimizer += dense.optimizer + experts.optimizer;
    activations += double(c.activations.total);
    per_micro_batch = std::max(per_micro_batch, double(c.activations.per_micro_batch));
  }
  // Each stage's arena holds one micro-batch; the schedule's further ones each keep a stage's
  // saved activations and input.
  const int64_t further = std::max<int64_t>(0, work.in_flight - int64_t(work.stages.size()));
  m.activations = activations + double(further) * per_micro_batch;
  return m;
}

}  // namespace tessera::dist
