// Runs one pipeline rank's part of a schedule's table (pipeline_schedule.h) for one optimizer
// step: each forward and backward on the model of its stage, in a micro-batch slot of its own,
// and the activations and gradients between stages sent and received over the pipeline
// communicator. Any table the simulator accepts runs, in its order.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/dist/communicator.h"
#include "tessera/dist/pipeline_schedule.h"
#include "tessera/model/transformer.h"

namespace tessera::dist {

// One micro-batch's tokens, [B, T] each: inputs for the first stage, targets for the last.
struct MicroBatch {
  const int32_t* inputs = nullptr;
  const int32_t* targets = nullptr;
};

class PipelineRuntime {
 public:
  // `stages[k]` is this rank's model of stage pp.rank() + k * table.ranks, built with at least
  // `slots[k]` micro-batches in flight (the simulator's stage_peak_in_flight). The table is
  // checked by the simulator here; a table whose backward is split in two (zb-h1) is refused:
  // the models run a stage's backward whole.
  PipelineRuntime(const PipelineTable& table, Communicator& pp,
                  std::vector<model::Transformer*> stages, std::span<const int> slots);

  // Runs this rank's actions over the table's micro-batches, each `B` x `T` tokens, their
  // gradients scaled by loss_scale; returns the sum of their losses on the rank of the last
  // stage, 0 on the others.
  double run(std::span<const MicroBatch> micro_batches, int64_t B, int64_t T, float loss_scale);

 private:
  struct Local {
    model::Transformer* model = nullptr;
    std::vector<int> free_slots;
    std::vector<int> slot_of;  // [micro-batch], -1 when it holds none
    Request activation_sent, gradient_sent;
  };
  Local& local(int stage);
  int take_slot(Local& l, int micro_batch);
  void wait_sends(Local& l);

  const PipelineTable& table_;
  Communicator& pp_;
  std::vector<Local> locals_;
};

}  // namespace tessera::dist
