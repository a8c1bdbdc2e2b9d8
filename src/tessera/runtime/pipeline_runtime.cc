#include "tessera/runtime/pipeline_runtime.h"

#include <algorithm>
#include <chrono>

#include "tessera/core/error.h"
#include "tessera/parallel/pipeline_simulator.h"
#include "tessera/parallel/rank_memory.h"

namespace tessera::runtime {

namespace {

using parallel::PipelineAction;
using parallel::PipelineTable;
using Kind = PipelineAction::Kind;

// Messages between two ranks arrive in the order they were sent, and each stage sends its
// activations and its gradients in the order of its micro-batches, so a tag per stage and
// direction tells them apart.
int tag_of(int stage, bool gradient) { return 2 * stage + (gradient ? 1 : 0); }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

StageModels build_stage_models(const model::ModelConfig& config, const PipelineTable& table,
                               int rank, std::span<const int64_t> boundaries, int64_t B, int64_t T,
                               const model::ModelOptions& options,
                               std::span<model::ParameterStore* const> stores) {
  check(int64_t(boundaries.size()) == table.stages() + 1,
        "a split of {} stages for a pipeline table of {}", int64_t(boundaries.size()) - 1,
        table.stages());
  const parallel::PipelineSimulation sim = parallel::simulate_pipeline(table);
  const model::ModelParallel base =
      options.parallel != nullptr ? *options.parallel : model::ModelParallel{};
  StageModels out;
  for (const model::Sharding& stage :
       parallel::rank_stages(base.sharding, boundaries, table.ranks, rank)) {
    model::ModelParallel p = base;
    p.sharding = stage;
    out.parallel.push_back(p);
  }
  check(stores.empty() || stores.size() == out.parallel.size(),
        "pipeline rank {} has {} stages but {} parameter stores", rank, out.parallel.size(),
        stores.size());
  for (size_t k = 0; k < out.parallel.size(); ++k) {
    out.slots.push_back(sim.stage_peak_in_flight[rank + int(k) * table.ranks]);
    model::ModelOptions o = options;
    o.parallel = &out.parallel[k];
    o.in_flight = out.slots.back();
    o.split_backward = table.splits_backward();
    o.store = stores.empty() ? nullptr : stores[k];
    out.models.push_back(std::make_unique<model::Transformer>(config, B, T, true, o));
    out.stages.push_back(out.models.back().get());
  }
  return out;
}

PipelineRuntime::PipelineRuntime(const PipelineTable& table, comm::Communicator& pp,
                                 std::span<model::Transformer* const> stages,
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
  parallel::simulate_pipeline(table);
  for (size_t k = 0; k < stages.size(); ++k) {
    check(!table.splits_backward() || stages[k]->options().split_backward,
          "the {} schedule splits each backward into its input and weight gradients: build the "
          "stage models with split_backward",
          enum_name(table.kind));
    Local l;
    l.stage = std::make_unique<PipelineStage>(*stages[k]);
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

// Sends leave from copies, so that no action ever waits for one: a rank that waited for its
// send to be received could wait for a peer that is itself waiting for this rank's next
// message. The simulator proves every table free of deadlock with sends that never wait.
// Buffers whose sends completed are reused; the first step sizes the pool.
void PipelineRuntime::send(const float* data, int64_t n, int dest, int tag) {
  size_t free = sends_.size();
  for (size_t i = 0; i < sends_.size(); ++i) {
    if (!sends_[i].request.pending() || pp_.test(sends_[i].request)) {
      free = i;
      break;
    }
  }
  if (free == sends_.size()) sends_.emplace_back();
  Send& s = sends_[free];
  s.buffer.resize(size_t(n));
  std::copy_n(data, n, s.buffer.data());
  s.request = pp_.start_send(s.buffer.data(), n, DType::f32, dest, tag);
}

double PipelineRuntime::run(std::span<const MicroBatch> micro_batches, int64_t B, int64_t T,
                            float loss_scale) {
  check(int(micro_batches.size()) == table_.micro_batches,
        "the pipeline table runs {} micro-batches (train.grad_accum), given {}",
        table_.micro_batches, micro_batches.size());
  const int64_t n = locals_.front().stage->floats(B, T);
  const int last = table_.stages() - 1;
  double loss = 0;
  forward_seconds_ = backward_seconds_ = weight_gradient_seconds_ = aux_loss_ = 0;
  for (const PipelineAction& a : table_.actions[pp_.rank()]) {
    Local& l = local(a.stage);
    PipelineStage& m = *l.stage;
    const MicroBatch& batch = micro_batches[a.micro_batch];
    switch (a.kind) {
      case Kind::kRecvActivation:
        pp_.recv(m.input(take_slot(l, a.micro_batch)), n, DType::f32, table_.rank_of(a.stage - 1),
                 tag_of(a.stage - 1, false));
        break;
      case Kind::kForward: {
        const auto start = std::chrono::steady_clock::now();
        const float f = m.forward(take_slot(l, a.micro_batch), batch.inputs, batch.targets, B, T,
                                  float(loss_scale * batch.share), batch.dropout_key);
        forward_seconds_ += seconds_since(start);
        if (a.stage == last) loss += f * batch.share;
        aux_loss_ += m.model().aux_loss();
        break;
      }
      case Kind::kSendActivation:
        send(m.output(), n, table_.rank_of(a.stage + 1), tag_of(a.stage, false));
        break;
      case Kind::kRecvGradient:
        pp_.recv(m.gradient(), n, DType::f32, table_.rank_of(a.stage + 1),
                 tag_of(a.stage + 1, true));
        break;
      case Kind::kBackward:
      case Kind::kBackwardInput:
      case Kind::kBackwardWeight: {
        int& slot = l.slot_of[a.micro_batch];
        check(slot >= 0, "the backward of micro-batch {} on stage {} has no forward", a.micro_batch,
              a.stage);
        const auto start = std::chrono::steady_clock::now();
        if (a.kind == Kind::kBackward) {
          m.backward(slot, batch.inputs);
        } else if (a.kind == Kind::kBackwardInput) {
          m.backward_input(slot, batch.inputs);
        } else {
          m.backward_weight(slot);
          weight_gradient_seconds_ += seconds_since(start);
        }
        backward_seconds_ += seconds_since(start);
        if (a.kind != Kind::kBackwardInput) {  // the slot is held until its weight gradient
          l.free_slots.push_back(slot);
          slot = -1;
        }
        break;
      }
      case Kind::kSendGradient:
        send(m.gradient(), n, table_.rank_of(a.stage - 1), tag_of(a.stage, true));
        break;
    }
  }
  for (Send& s : sends_) {
    if (s.request.pending()) pp_.wait(s.request);
  }
  return loss;
}

// The stages in order: each receives its input from the rank of the one before, whose send waits
// only for that receive, so the chain cannot deadlock.
double PipelineRuntime::evaluate(const MicroBatch& batch, int64_t B, int64_t T) {
  const int64_t n = locals_.front().stage->floats(B, T);
  const int last = table_.stages() - 1;
  double loss = 0;
  for (int s = pp_.rank(); s <= last; s += table_.ranks) {
    model::Transformer& m = local(s).stage->model();
    if (s > 0) {
      pp_.recv(m.stage_input(0), n, DType::f32, table_.rank_of(s - 1), tag_of(s - 1, false));
    }
    const float f = m.forward(batch.inputs, batch.targets, B, T);
    if (s == last) {
      loss = f;
    } else {
      pp_.send(m.stage_output(), n, DType::f32, table_.rank_of(s + 1), tag_of(s, false));
    }
  }
  return loss;
}

PhaseSeconds PipelineRuntime::phase_seconds() const {
  PhaseSeconds sum;
  for (const Local& l : locals_) sum += l.stage->phase_seconds();
  return sum;
}

}  // namespace tessera::runtime
