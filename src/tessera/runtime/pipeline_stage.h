// A pipeline stage's runner: a model's forwards and backwards apart, with up to in_flight
// micro-batches between them, each in a slot of the model's activations, and a backward that may
// run in two halves (zero-bubble schedules).
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/model/transformer.h"
#include "tessera/runtime/phase_clock.h"

namespace tessera::runtime {

class PipelineStage {
 public:
  // `model` is built for training (with in_flight slots, and split_backward for a split
  // backward) and outlives the stage.
  explicit PipelineStage(model::Transformer& model);

  // The first stage reads tokens; the others read input(slot), which the caller fills with the
  // previous stage's output first. The last stage returns the mean cross-entropy (others 0) and
  // takes its head's gradients, scaled by loss_scale, at once, so that no slot keeps logits.
  // dropout_key: the micro-batch's (Transformer::set_dropout_key).
  float forward(int64_t slot, const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                float loss_scale, uint64_t dropout_key = 0);
  // Accumulates the gradients of the micro-batch in `slot` (inputs: its tokens, on the first
  // stage) and frees the slot.
  void backward(int64_t slot, const int32_t* inputs);
  // The same backward in two halves: the input half leaves gradient() for the previous stage and
  // accumulates every gradient but the weights of the attention and dense-MLP linears (norms,
  // biases, the embedding, a mixture of experts); the weight half, later, accumulates those and
  // frees the slot.
  void backward_input(int64_t slot, const int32_t* inputs);
  void backward_weight(int64_t slot);

  // [R, C] each (floats(B, T)): where the caller writes a slot's input before its forward; the
  // last forward's output, for the next stage; where the caller writes d(loss)/d(output) before a
  // backward on a stage without the head, and where the backward of a stage without the
  // embedding leaves d(loss)/d(input).
  float* input(int64_t slot) { return model_.stage_input(slot); }
  const float* output() const { return model_.stage_output(); }
  float* gradient() { return model_.stage_gradient(); }
  int64_t floats(int64_t B, int64_t T) const { return model_.stage_floats(B, T); }

  model::Transformer& model() { return model_; }
  const PhaseSeconds& phase_seconds() const { return clock_.seconds(); }

 private:
  // What a forward left in its slot for the backward.
  struct Slot {
    int64_t B = 0, T = 0;
    float loss_scale = 1;
  };
  void check_split() const;
  const Slot& held(int64_t slot) const;
  void backward_slot(int64_t slot, const int32_t* inputs, bool hold_weights);

  model::Transformer& model_;
  PhaseClock clock_;
  std::vector<Slot> slots_;
};

}  // namespace tessera::runtime
