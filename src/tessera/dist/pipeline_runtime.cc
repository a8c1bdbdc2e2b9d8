#include "tessera/dist/pipeline_runtime.h"

#include "tessera/core/error.h"
#include "tessera/dist/pipeline_simulator.h"

namespace tessera::dist {

namespace {

using Kind = PipelineAction::Kind;

// Messages between two ranks arrive in the order they were sent, and each stage sends its
// activations and its gradients in the order of its micro-batches, so a tag per stage and
// direction tells them apart.
int tag_of(int stage, bool gradient) { return 2 * stage + (gradient ? 1 : 0); }

}  // namespace

PipelineRuntime::PipelineRuntime(const PipelineTable& table, Communicator& pp,
                                 std::vector<model::Transformer*> stages,
                                 std::span<const int> slots)
    : table_(table), pp_(pp) {
  check(pp.size() == table.ranks,
        "a pipeline table for {} ranks cannot run on a pipeline group of {}", table.ranks,
        pp.size());
  check(int(stages.size()) == table.virtual_stages && slots.size() == stages.size(),
        "pipeline rank {} needs a model and a slot count for each of its {} stages, got {} and {}",
        pp.rank(), table.virtual_stages, stages.size(), slots.size());
  check(table.ranks > 1 || table.stages() == 1,
        "{} stages on one pipeline rank would hand activations to themselves: use one stage",
        table.stages());
  simulate_pipeline(table);
  for (const PipelineAction& a : table.actions[pp.rank()]) {
    check(a.kind != Kind::kBackwardInput && a.kind != Kind::kBackwardWeight,
          "the {} schedule splits each backward into its input and weight gradients, which the "
          "stage models do not yet run apart; choose gpipe, 1f1b or interleaved",
          pipeline_schedule_name(table.kind));
  }
  for (size_t k = 0; k < stages.size(); ++k) {
    Local l;
    l.model = stages[k];
    check(slots[k] >= 1, "stage {} needs at least one micro-batch slot", k);
    for (int s = slots[k] - 1; s >= 0; --s) l.free_slots.push_back(s);
    l.slot_of.assign(table.micro_batches, -1);
    locals_.push_back(std::move(l));
  }
}

PipelineRuntime::Local& PipelineRuntime::local(int stage) {
  check(table_.rank_of(stage) == pp_.rank(), "stage {} is not on pipeline rank {}", stage,
        pp_.rank());
  return locals_[stage / table_.ranks];
}

int PipelineRuntime::take_slot(Local& l, int micro_batch) {
  int& slot = l.slot_of[micro_batch];
  if (slot < 0) {
    check(!l.free_slots.empty(),
          "micro-batch {} finds no free slot: the stage model holds fewer micro-batches than "
          "the schedule keeps in flight",
          micro_batch);
    slot = l.free_slots.back();
    l.free_slots.pop_back();
  }
  return slot;
}

// A stage's output and gradient buffers are rewritten by its next forward, receive or backward:
// what it sent from them must have left first.
void PipelineRuntime::wait_sends(Local& l) {
  if (l.activation_sent.pending()) pp_.wait(l.activation_sent);
  if (l.gradient_sent.pending()) pp_.wait(l.gradient_sent);
}

double PipelineRuntime::run(std::span<const MicroBatch> micro_batches, int64_t B, int64_t T,
                            float loss_scale) {
  check(int(micro_batches.size()) == table_.micro_batches,
        "the pipeline table runs {} micro-batches (train.grad_accum), given {}",
        table_.micro_batches, micro_batches.size());
  const int64_t n = locals_.front().model->stage_floats(B, T);
  const int last = table_.stages() - 1;
  double loss = 0;
  for (const PipelineAction& a : table_.actions[pp_.rank()]) {
    Local& l = local(a.stage);
    model::Transformer& m = *l.model;
    const MicroBatch& batch = micro_batches[a.micro_batch];
    switch (a.kind) {
      case Kind::kRecvActivation:
        pp_.recv(m.stage_input(take_slot(l, a.micro_batch)), n, DType::f32,
                 table_.rank_of(a.stage - 1), tag_of(a.stage - 1, false));
        break;
      case Kind::kForward: {
        wait_sends(l);
        const float f = m.stage_forward(take_slot(l, a.micro_batch), batch.inputs, batch.targets, B,
                                        T, loss_scale);
        if (a.stage == last) loss += f;
        break;
      }
      case Kind::kSendActivation:
        l.activation_sent = pp_.start_send(m.stage_output(), n, DType::f32,
                                           table_.rank_of(a.stage + 1), tag_of(a.stage, false));
        break;
      case Kind::kRecvGradient:
        wait_sends(l);
        pp_.recv(m.stage_gradient(), n, DType::f32, table_.rank_of(a.stage + 1),
                 tag_of(a.stage + 1, true));
        break;
      case Kind::kBackward: {
        wait_sends(l);
        int& slot = l.slot_of[a.micro_batch];
        check(slot >= 0, "the backward of micro-batch {} on stage {} has no forward", a.micro_batch,
              a.stage);
        m.stage_backward(slot, batch.inputs);
        l.free_slots.push_back(slot);
        slot = -1;
        break;
      }
      case Kind::kSendGradient:
        l.gradient_sent = pp_.start_send(m.stage_gradient(), n, DType::f32,
                                         table_.rank_of(a.stage - 1), tag_of(a.stage, true));
        break;
      case Kind::kBackwardInput:
      case Kind::kBackwardWeight:
        fail("pipeline action {} is not run by this runtime", to_string(a));
    }
  }
  for (Local& l : locals_) wait_sends(l);
  return loss;
}

}  // namespace tessera::dist
