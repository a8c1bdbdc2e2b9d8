#pragma once

#include <span>
#include <string>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/model/parameters.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

// AdamW with f32 moments laid out like the parameters; weight decay only where the layout
// marks a parameter for it.
class AdamW {
 public:
  AdamW(const model::ParameterLayout& layout, const TrainConfig& config);

  void step(std::span<float> params, std::span<const float> grads, double lr);
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t n) { steps_taken_ = n; }
  // The moments under checkpoint names "adamw.m.<param>" and "adamw.v.<param>".
  std::vector<NamedTensor> state_tensors();

 private:
  const model::ParameterLayout& layout_;
  TrainConfig config_;
  Arena arena_;
  float* m_;
  float* v_;
  int64_t steps_taken_ = 0;
};

// Scales grads so that their global L2 norm is at most max_norm (0 = no clipping); returns the
// norm before clipping.
double clip_grad_norm(std::span<float> grads, double max_norm);

}  // namespace tessera::train
