// Pipeline schedules as data: for each pipeline rank, the ordered list of what it does (a
// forward or a backward of one stage for one micro-batch, the backward split into its input- and
// weight-gradient halves for zero-bubble schedules, and the sends and receives between ranks).
// The generators below write GPipe, 1F1B, interleaved 1F1B and ZB-H1 tables; the runtime executes
// any table, and pipeline_simulator.h checks one before it runs and measures its bubble.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/comm/mesh_shape.h"

namespace tessera::parallel {

struct PipelineAction {
  enum class Kind {
    kForward,
    kBackward,       // input and weight gradients together
    kBackwardInput,  // zero-bubble: the gradient of the stage's input, which the previous waits for
    kBackwardWeight,  // zero-bubble: the weight gradients, which nothing waits for
    kSendActivation,  // the stage's output to the rank of stage + 1
    kRecvActivation,  // the input of `stage` from the rank of stage - 1
    kSendGradient,    // the gradient of the stage's input to the rank of stage - 1
    kRecvGradient,    // the gradient of the output of `stage` from the rank of stage + 1
  };
  Kind kind;
  int stage;  // the (virtual) stage computed, sent from or received into
  int micro_batch;

  bool operator==(const PipelineAction&) const = default;
};

// What one micro-batch's forward, input gradient and weight gradient cost, in seconds or any unit
// (a whole backward costs backward_input + backward_weight).
struct PipelineCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
};

// "F(s1,m3)", "B(...)", "Bi", "W", "sendA", "recvA", "sendG", "recvG".
std::string to_string(const PipelineAction& action);

// Stage s of ranks * virtual_stages runs on rank s % ranks, so a rank holds stages r, r + ranks,
// ... (Megatron's interleaving; one stage per rank without it).
struct PipelineTable {
  comm::PipelineScheduleKind kind;
  int ranks = 1;
  int virtual_stages = 1;  // per rank
  int micro_batches = 1;
  std::vector<std::vector<PipelineAction>> actions;  // [rank]

  int stages() const { return ranks * virtual_stages; }
  // Whether its backwards run as an input and a weight gradient apart (zero-bubble).
  bool splits_backward() const { return kind == comm::PipelineScheduleKind::kZeroBubbleH1; }
  int rank_of(int stage) const { return stage % ranks; }
};

// The table of `kind` for `ranks` pipeline ranks and `micro_batches` micro-batches (the run's
// train.grad_accum). Interleaving needs virtual_stages >= 2 and a multiple of `ranks`
// micro-batches; the others take virtual_stages = 1. Bad counts are an error that names them.
// ZB-H1 places each rank's actions by what they cost on its stage (`stage_costs`, one per stage;
// alike when empty); the other tables do not depend on costs.
PipelineTable make_pipeline_table(comm::PipelineScheduleKind kind, int ranks, int virtual_stages,
                                  int micro_batches,
                                  std::span<const PipelineCosts> stage_costs = {});

}  // namespace tessera::parallel
