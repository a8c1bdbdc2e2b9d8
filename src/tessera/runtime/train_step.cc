#include "tessera/runtime/train_step.h"

#include "tessera/core/error.h"

namespace tessera::runtime {

TrainStep::TrainStep(model::Transformer& model) : model_(model), clock_(model) {
  const model::ModelLayout& layout = model.model_layout();
  check(model.training() && layout.has_embedding && layout.has_head,
        "a training step runs a whole model built for training; a pipeline stage runs in a "
        "PipelineStage");
}

float TrainStep::forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B,
                                  int64_t T, float loss_scale, uint64_t dropout_key) {
  model_.set_dropout_key(0, dropout_key);
  model_.begin_pass(0);
  clock_.enter(Phase::kForward);
  model_.forward_blocks(inputs, B, T);
  const float loss = model_.head_loss(targets, B * T, loss_scale);
  clock_.enter(Phase::kBackward);
  model_.head_backward(B * T);
  model_.backward_blocks(inputs, B, T, loss_scale, false);
  clock_.enter(Phase::kIdle);
  model_.end_pass();
  return loss;
}

}  // namespace tessera::runtime
