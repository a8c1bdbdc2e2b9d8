// The training micro-step of a whole model (both ends on this rank): a forward, the loss and a
// backward over one batch, timed by phase.
#pragma once

#include <cstdint>

#include "tessera/model/transformer.h"
#include "tessera/runtime/phase_clock.h"

namespace tessera::runtime {

class TrainStep {
 public:
  // `model` is built for training, holds the embedding and the head, and outlives the step.
  explicit TrainStep(model::Transformer& model);

  // Returns the mean cross-entropy of inputs[B,T] against targets[B,T] and accumulates
  // d(loss_scale * (mean cross-entropy + MoE auxiliary loss))/d(params) into the model's
  // gradients. The loss gradient is fused into the softmax: the [B*T, vocab] logits are
  // overwritten by it.
  // dropout_key: the micro-batch's (Transformer::set_dropout_key).
  float forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                         float loss_scale, uint64_t dropout_key = 0);
  const PhaseSeconds& phase_seconds() const { return clock_.seconds(); }
  model::Transformer& model() { return model_; }

 private:
  model::Transformer& model_;
  PhaseClock clock_;
};

}  // namespace tessera::runtime
