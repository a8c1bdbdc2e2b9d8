// How a model's blocks are split into pipeline stages: consecutive ranges of blocks, the
// embedding on the first stage and the head and loss on the last. Uneven splits are the rule at
// scale (Llama 3 405B put 126 blocks on 16 stages), given by mesh.pp_layers or balanced here.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/comm/mesh_shape.h"
#include "tessera/model/model_config.h"
#include "tessera/parallel/pipeline_schedule.h"

namespace tessera::parallel {

// The compute of the embedding and of the head with its loss, in blocks' worth (a GPT-2 124M
// head, 768 x 50257, is about 4.5 blocks of 7.1M matmul weights).
struct StageExtras {
  double embedding = 0;
  double head = 0;
};

// Blocks per stage, first to last, balancing compute: the largest stage's blocks plus its
// extras is as small as it can be, and where blocks are left over the first stage (which holds
// the most micro-batches in flight under 1F1B) gives one up first, then the last, then the
// others from the front. Every stage gets at least one block: n_layer >= stages.
std::vector<int64_t> balanced_stage_blocks(int64_t n_layer, int64_t stages,
                                           const StageExtras& extras);

// mesh.pp_layers checked against the model: one count per stage, each at least 1, summing to
// n_layer; otherwise an error naming the key and what is wrong.
std::vector<int64_t> given_stage_blocks(std::span<const int64_t> pp_layers, int64_t n_layer,
                                        int64_t stages);

// The model's extras: its head's matmul weights over a block's (routed experts by their token
// share); the embedding is a lookup and costs nothing.
StageExtras stage_extras(const model::ModelConfig& config);

// The split a run uses: mesh.pp_layers when given (pp_layers non-empty), otherwise the balanced
// split for the model's extras.
std::vector<int64_t> stage_blocks(const model::ModelConfig& config, int64_t stages,
                                  std::span<const int64_t> pp_layers);

// The first block of each stage and, last, n_layer.
std::vector<int64_t> stage_boundaries(std::span<const int64_t> blocks_per_stage);

// What one micro-batch's forward, input gradient and weight gradient cost on each stage of the
// split `boundaries`, in blocks' worth of matmuls (as stage_extras weighs them): each of a block's
// three parts costs one; the last stage's forward also takes its head's forward and backward,
// three heads' worth, since a stage model takes the head's gradient in the forward; the embedding
// costs nothing.
std::vector<PipelineCosts> stage_costs(const model::ModelConfig& config,
                                       std::span<const int64_t> boundaries);

// The table a run of `config` on `mesh` steps through, over the split `boundaries` and
// `micro_batches` micro-batches: mesh.pp_schedule (1F1B on one pipeline rank), ZB-H1 placed by
// the split's stage_costs. The trainer, the dry run and the config's checks all take it from here.
PipelineTable run_pipeline_table(const model::ModelConfig& config, const comm::MeshShape& mesh,
                                 std::span<const int64_t> boundaries, int64_t micro_batches);

}  // namespace tessera::parallel
