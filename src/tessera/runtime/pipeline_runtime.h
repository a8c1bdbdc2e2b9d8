// Runs one pipeline rank's part of a schedule's table (pipeline_schedule.h) for one optimizer
// step: each forward and backward on the model of its stage, in a micro-batch slot of its own,
// and the activations and gradients between stages sent and received over the pipeline
// communicator. Any table the simulator accepts runs, in its order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/model/transformer.h"
#include "tessera/parallel/pipeline_schedule.h"
#include "tessera/runtime/phase_clock.h"
#include "tessera/runtime/pipeline_stage.h"

namespace tessera::runtime {

// One micro-batch's tokens, [B, T] each: inputs for the first stage, targets for the last.
struct MicroBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
  // Its share of the step's loss: its mean loss counts `share` times in the step's, and its
  // gradients are scaled by that much more (a step weighs micro-batches by their trained targets).
  double share = 1;
  uint64_t dropout_key = 0;  // Transformer::set_dropout_key; 0: no dropout
};

// One pipeline rank's models for a table: one for each of its stages of the split `boundaries`
// (stage_boundaries: each stage's first block, then n_layer), built with `options` (precision,
// recomputation, and the parallel groups, whose sharding gives the tp and ep coordinates) and the
// slots the simulator says the stage holds at its peak. stores[k], when given, keeps stage k's
// parameters; otherwise the models keep their own. The models are built in place and never move.
struct StageModels {
  std::vector<model::ModelParallel> parallel;  // [k]: the stage's blocks
  std::vector<std::unique_ptr<model::Transformer>> models;
  std::vector<model::Transformer*> stages;
  std::vector<int> slots;
};
StageModels build_stage_models(const model::ModelConfig& config,
                               const parallel::PipelineTable& table, int rank,
                               std::span<const int64_t> boundaries, int64_t B, int64_t T,
                               const model::ModelOptions& options,
                               std::span<model::ParameterStore* const> stores = {});

class PipelineRuntime {
 public:
  // `stages[k]` is this rank's model of stage pp.rank() + k * table.ranks, built with at least
  // `slots[k]` micro-batches in flight (the simulator's stage_peak_in_flight), and built to split
  // their backward when the table does (zb-h1). The table is checked by the simulator here.
  PipelineRuntime(const parallel::PipelineTable& table, comm::Communicator& pp,
                  std::span<model::Transformer* const> stages, std::span<const int> slots);

  // Runs this rank's actions over the table's micro-batches, each `B` x `T` tokens, their
  // gradients scaled by loss_scale x their share; returns the sum of their losses times their
  // shares on the rank of the last stage, 0 on the others.
  double run(std::span<const MicroBatch> micro_batches, int64_t B, int64_t T, float loss_scale);
  // The MoE auxiliary losses of the last run's forwards on this rank, summed.
  double aux_loss() const { return aux_loss_; }

  // One micro-batch through every stage, forward only (held-out loss): returns its mean
  // cross-entropy on the rank of the last stage, 0 on the others.
  double evaluate(const MicroBatch& batch, int64_t B, int64_t T);

  // Seconds the last run spent in its stages' forwards and backwards, the rest of it being
  // messages and waiting for them; of the backwards, the weight-gradient halves of a split one.
  double forward_seconds() const { return forward_seconds_; }
  double backward_seconds() const { return backward_seconds_; }
  double weight_gradient_seconds() const { return weight_gradient_seconds_; }
  // Of every run so far, summed over this rank's stages.
  PhaseSeconds phase_seconds() const;

 private:
  struct Local {
    std::unique_ptr<PipelineStage> stage;
    std::vector<int> free_slots;
    std::vector<int> slot_of;  // [micro-batch], -1 when it holds none
  };
  struct Send {
    std::vector<float> buffer;
    comm::Request request;
  };
  Local& local(int stage);
  int take_slot(Local& l, int micro_batch);
  void send(const float* data, int64_t n, int dest, int tag);

  const parallel::PipelineTable& table_;
  comm::Communicator& pp_;
  std::vector<Local> locals_;
  std::vector<Send> sends_;  // in flight or free
  double forward_seconds_ = 0, backward_seconds_ = 0, weight_gradient_seconds_ = 0, aux_loss_ = 0;
};

}  // namespace tessera::runtime
