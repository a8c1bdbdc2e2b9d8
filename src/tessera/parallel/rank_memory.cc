#include "tessera/parallel/rank_memory.h"

#include "tessera/core/error.h"
#include "tessera/model/frozen_parameters.h"
#include "tessera/parallel/zero_memory.h"

namespace tessera::parallel {

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

RankWork rank_work(const model::Sharding& sharding, std::span<const int64_t> boundaries,
                   int64_t ranks, int64_t rank, std::span<const int> stage_peak_in_flight) {
  RankWork work{rank_stages(sharding, boundaries, ranks, rank), {}};
  for (size_t k = 0; k < work.stages.size(); ++k) {
    work.in_flight.push_back(stage_peak_in_flight[rank + int64_t(k) * ranks]);
  }
  return work;
}

MemoryModel::MemoryModel(const model::ModelConfig& config) : config_(config) {}

std::pair<MemoryModel::StageKey, const MemoryModel::Stage*> MemoryModel::stage(
    const model::Sharding& s) {
  const int64_t end = s.block_end < 0 ? config_.n_layer : s.block_end;
  const StageKey key{s.tp, s.ep, end - s.block_begin, s.block_begin == 0, end == config_.n_layer};
  const auto [it, added] = stages_.try_emplace(key);
  if (added) {
    const model::Sharding first{
        .tp = s.tp, .ep = s.ep, .block_begin = s.block_begin, .block_end = end};
    it->second.layout = model::model_layout(config_, first);
    it->second.dense = double(it->second.layout.trained_dense());
    it->second.experts = double(it->second.layout.trained_experts());
  }
  return {key, &it->second};
}

const model::ActivationBytes& MemoryModel::activations(const model::Sharding& s,
                                                       const model::ActivationOptions& o) {
  const auto [stage_key, held] = stage(s);
  const ActivationKey key{stage_key,   o.max_batch,   o.max_seq,       o.training,
                          o.precision, o.recompute,   o.weights,       o.sequence_parallel,
                          o.threads,   o.batch_ranks, o.split_backward};
  const auto [it, added] = activations_.try_emplace(key);
  if (added) {
    model::ActivationOptions one = o;
    one.in_flight = 1;
    it->second = model::activation_bytes(config_, held->layout, one);
  }
  return it->second;
}

RankMemory MemoryModel::rank(const RankWork& work, const TrainingShape& shape) {
  check(!work.stages.empty() && work.in_flight.size() == work.stages.size(),
        "a rank needs at least one stage and each stage its micro-batches in flight");
  const model::Precision precision = shape.activations.precision;
  RankMemory m;
  for (size_t i = 0; i < work.stages.size(); ++i) {
    const model::Sharding& s = work.stages[i];
    check(work.in_flight[i] >= 1, "a stage holds at least one micro-batch, not {}",
          work.in_flight[i]);
    const Stage& c = *stage(s).second;
    const model::ActivationBytes& a = activations(s, shape.activations);
    const ZeroBytes dense = zero_model_state(shape.zero, precision, c.dense, shape.dp);
    const ZeroBytes experts = zero_model_state(shape.zero, precision, c.experts, shape.dp / s.ep);
    m.params +=
        dense.params + experts.params + double(model::FrozenParameters::bytes(c.layout, precision));
    m.grads += dense.grads + experts.grads;
    m.optimizer += dense.optimizer + experts.optimizer;
    // The stage's arena holds one micro-batch; each further slot its input and saved activations
    // (model::activation_bytes with in_flight slots allocates exactly this).
    m.activations += double(a.total) + double(work.in_flight[i] - 1) * double(a.per_micro_batch);
    if (shape.bf16_saved_state && precision != model::Precision::kF32) {
      m.activations -= 0.5 * double(a.saved_f32_state_per_layer) *
                       double((s.block_end - s.block_begin) * work.in_flight[i]);
    }
  }
  return m;
}

}  // namespace tessera::parallel
