#include "tessera/runtime/pipeline_stage.h"

#include "tessera/core/error.h"
#include "tessera/kernels/device.h"

namespace tessera::runtime {

PipelineStage::PipelineStage(model::Transformer& model)
    : model_(model), clock_(model), slots_(size_t(model.options().in_flight)) {
  check(model.training(), "a pipeline stage runs a model built for training");
}

void PipelineStage::check_split() const {
  check(model_.options().split_backward,
        "the stage's model was not built to split its backward (ModelOptions::split_backward)");
}

const PipelineStage::Slot& PipelineStage::held(int64_t slot) const {
  check(slot >= 0 && slot < int64_t(slots_.size()) && slots_[slot].B > 0,
        "the backward of slot {}, which holds no forward (the stage has {} slots)", slot,
        slots_.size());
  return slots_[slot];
}

float PipelineStage::forward(int64_t slot, const int32_t* inputs, const int32_t* targets, int64_t B,
                             int64_t T, float loss_scale, uint64_t dropout_key) {
  model_.set_dropout_key(slot, dropout_key);
  model_.begin_pass(slot);
  slots_[slot] = {B, T, loss_scale};
  clock_.enter(Phase::kForward);
  model_.forward_blocks(inputs, B, T);
  float loss = 0;
  if (model_.model_layout().has_head) {
    loss = model_.head_loss(targets, B * T, loss_scale);
    clock_.enter(Phase::kBackward);
    model_.head_backward(B * T);
    // The last block's output is spent: it keeps the head's input gradient until the backward.
    kernels::copy_on_device(model_.context(), model_.stage_output(slot), model_.stage_gradient(),
                            sizeof(float) * floats(B, T));
  }
  clock_.enter(Phase::kIdle);
  model_.end_pass();
  return loss;
}

void PipelineStage::backward(int64_t slot, const int32_t* inputs) {
  backward_slot(slot, inputs, false);
  slots_[slot] = {};
}

void PipelineStage::backward_input(int64_t slot, const int32_t* inputs) {
  check_split();
  backward_slot(slot, inputs, true);
}

void PipelineStage::backward_weight(int64_t slot) {
  check_split();
  const Slot& s = held(slot);
  model_.begin_pass(slot);
  clock_.enter(Phase::kBackward);
  model_.weight_backward_blocks(s.B * s.T);
  clock_.enter(Phase::kIdle);
  model_.end_pass();
  slots_[slot] = {};
}

void PipelineStage::backward_slot(int64_t slot, const int32_t* inputs, bool hold_weights) {
  const Slot& s = held(slot);
  model_.begin_pass(slot);
  if (model_.model_layout().has_head) {
    kernels::copy_on_device(model_.context(), model_.stage_gradient(), model_.stage_output(slot),
                            sizeof(float) * floats(s.B, s.T));
  }
  clock_.enter(Phase::kBackward);
  model_.backward_blocks(inputs, s.B, s.T, s.loss_scale, hold_weights);
  clock_.enter(Phase::kIdle);
  model_.end_pass();
}

}  // namespace tessera::runtime
