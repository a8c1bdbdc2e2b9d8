// What whole-model gradient checks share: weights that make every gradient visible, and the
// central difference of the loss in one parameter.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tessera/model/parameters.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"

namespace tessera::model {

// Gains around 1 and every matrix N(0, 1 / its width), so that no part's gradient vanishes.
inline void randomize_for_gradient_check(Transformer& model, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [name, view] : named_views(model.layout(), model.params().data())) {
    float* p = view.as<float>();
    const bool gain = view.shape.rank() == 1;
    for (int64_t i = 0; i < view.numel(); ++i) {
      const float r = normal(rng);
      p[i] = gain ? 1.0f + 0.3f * r : r / std::sqrt(float(view.shape[1]));
    }
  }
}

// A batch of B x T random tokens, inputs and targets.
struct RandomBatch {
  std::vector<int32_t> inputs, targets;
};
// Draws the batch, and returns the model's gradients of its loss on it (with the dropout of
// dropout_key, Transformer::set_dropout_key).
inline std::vector<float> gradients_on_random_batch(Transformer& model, std::mt19937& rng,
                                                    int64_t B, int64_t T, RandomBatch& batch,
                                                    uint64_t dropout_key = 0) {
  batch.inputs.resize(size_t(B * T));
  batch.targets.resize(size_t(B * T));
  std::uniform_int_distribution<int32_t> token(0, int32_t(model.config().vocab_size) - 1);
  for (int32_t& t : batch.inputs) t = token(rng);
  for (int32_t& t : batch.targets) t = token(rng);
  model.zero_grad();
  runtime::TrainStep(model).forward_backward(batch.inputs.data(), batch.targets.data(), B, T, 1.0f,
                                             dropout_key);
  return {model.grads().begin(), model.grads().end()};
}

// (loss(p + h) - loss(p - h)) / 2h in the flat parameter `at`, which is left as it was.
inline double central_difference(Transformer& model, const int32_t* inputs, const int32_t* targets,
                                 int64_t B, int64_t T, int64_t at, float h,
                                 uint64_t dropout_key = 0) {
  float* params = model.params().data();
  const float saved = params[at];
  params[at] = saved + h;
  const double up = model.forward(inputs, targets, B, T, dropout_key);
  params[at] = saved - h;
  const double down = model.forward(inputs, targets, B, T, dropout_key);
  params[at] = saved;
  return (up - down) / (2.0 * h);
}

}  // namespace tessera::model
