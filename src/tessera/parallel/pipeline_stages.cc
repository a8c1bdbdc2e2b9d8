#include "tessera/parallel/pipeline_stages.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/model/block_spec.h"

namespace tessera::parallel {
namespace {

// The blocks each stage can take when no stage may cost more than `capacity`.
std::vector<int64_t> capacities(double capacity, int64_t stages, const StageExtras& extras) {
  std::vector<int64_t> cap(stages, int64_t(std::floor(capacity + 1e-9)));
  if (stages == 1) {
    cap[0] = int64_t(std::floor(capacity - extras.embedding - extras.head + 1e-9));
  } else {
    cap.front() = int64_t(std::floor(capacity - extras.embedding + 1e-9));
    cap.back() = int64_t(std::floor(capacity - extras.head + 1e-9));
  }
  return cap;
}

}  // namespace

std::vector<int64_t> balanced_stage_blocks(int64_t n_layer, int64_t stages,
                                           const StageExtras& extras) {
  check(stages >= 1, "a pipeline needs at least one stage, got mesh.pp = {}", stages);
  check(n_layer >= stages, "{} blocks cannot fill {} pipeline stages (mesh.pp): each needs a block",
        n_layer, stages);
  // The best largest stage costs a whole number of blocks plus nothing, the embedding or the head.
  std::vector<double> candidates;
  for (int64_t k = 1; k <= n_layer; ++k) {
    for (double extra : {0.0, extras.embedding, extras.head, extras.embedding + extras.head}) {
      candidates.push_back(double(k) + extra);
    }
  }
  std::sort(candidates.begin(), candidates.end());
  for (double capacity : candidates) {
    std::vector<int64_t> blocks = capacities(capacity, stages, extras);
    if (*std::min_element(blocks.begin(), blocks.end()) < 1) continue;
    int64_t surplus = std::accumulate(blocks.begin(), blocks.end(), int64_t{0}) - n_layer;
    if (surplus < 0) continue;
    std::vector<int64_t> order(stages);
    std::iota(order.begin(), order.end(), 0);
    if (stages > 1) std::rotate(order.begin() + 1, order.end() - 1, order.end());  // 0, last, 1, ..
    while (surplus > 0) {
      for (int64_t s : order) {
        if (surplus > 0 && blocks[s] > 1) {
          --blocks[s];
          --surplus;
        }
      }
    }
    return blocks;
  }
  fail("cannot split {} blocks into {} pipeline stages", n_layer, stages);
}

std::vector<int64_t> given_stage_blocks(std::span<const int64_t> pp_layers, int64_t n_layer,
                                        int64_t stages) {
  check(int64_t(pp_layers.size()) == stages,
        "mesh.pp_layers = [{}] has {} entries, but mesh.pp = {}: give one block count per stage",
        fmt::join(pp_layers, ", "), pp_layers.size(), stages);
  for (size_t s = 0; s < pp_layers.size(); ++s) {
    check(pp_layers[s] >= 1, "mesh.pp_layers = [{}]: stage {} has {} blocks; each needs at least 1",
          fmt::join(pp_layers, ", "), s, pp_layers[s]);
  }
  const int64_t total = std::accumulate(pp_layers.begin(), pp_layers.end(), int64_t{0});
  check(total == n_layer,
        "mesh.pp_layers = [{}] sums to {} blocks, but the model has {} (model.n_layer)",
        fmt::join(pp_layers, ", "), total, n_layer);
  return {pp_layers.begin(), pp_layers.end()};
}

std::vector<int64_t> stage_boundaries(std::span<const int64_t> blocks_per_stage) {
  std::vector<int64_t> first{0};
  for (int64_t n : blocks_per_stage) first.push_back(first.back() + n);
  return first;
}

StageExtras stage_extras(const model::ModelConfig& config) {
  const model::MatmulWeights w = model::matmul_weights(model::model_spec(config));
  return {0.0, w.head / w.block};
}

std::vector<PipelineCosts> stage_costs(const model::ModelConfig& config,
                                       std::span<const int64_t> boundaries) {
  const StageExtras extras = stage_extras(config);
  std::vector<PipelineCosts> costs;
  for (size_t s = 0; s + 1 < boundaries.size(); ++s) {
    const double blocks = double(boundaries[s + 1] - boundaries[s]);
    const bool last = s + 2 == boundaries.size();
    costs.push_back({blocks + (last ? 3 * extras.head : 0.0), blocks, blocks});
  }
  return costs;
}

PipelineTable run_pipeline_table(const model::ModelConfig& config, const comm::MeshShape& mesh,
                                 std::span<const int64_t> boundaries, int64_t micro_batches) {
  return make_pipeline_table(mesh.pp > 1 ? mesh.pp_schedule : comm::PipelineScheduleKind::k1F1B,
                             int(mesh.pp), int(mesh.pp_virtual), int(micro_batches),
                             stage_costs(config, boundaries));
}

std::vector<int64_t> stage_blocks(const model::ModelConfig& config, int64_t stages,
                                  std::span<const int64_t> pp_layers) {
  if (!pp_layers.empty()) return given_stage_blocks(pp_layers, config.n_layer, stages);
  return balanced_stage_blocks(config.n_layer, stages, stage_extras(config));
}

}  // namespace tessera::parallel
