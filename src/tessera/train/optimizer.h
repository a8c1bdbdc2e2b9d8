#pragma once

#include <span>
#include <vector>

#include "tessera/kernels/device.h"
#include "tessera/model/parameters.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

// AdamW with f32 moments over the flat parameter range [begin, end): all parameters, or one
// data-parallel rank's shard of them. Weight decay applies only where the layout marks a
// parameter for it.
class AdamW {
 public:
  // The moments live on ctx's device, as the parameters and gradients it updates.
  AdamW(const kernels::Context& ctx, const model::ParameterLayout& layout,
        const TrainConfig& config, int64_t begin, int64_t end);

  // Starts a step; the updates that follow use its bias correction.
  void begin_step() { ++steps_taken_; }
  // Updates the flat range [first, first + n), which lies inside the optimizer's range; params
  // and grads point at element `first`.
  void update(int64_t first, int64_t n, float* params, const float* grads, double lr);
  int64_t steps_taken() const { return steps_taken_; }
  void set_steps_taken(int64_t n) { steps_taken_ = n; }
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }
  std::span<float> m() { return {m_.data(), size_t(m_.size())}; }
  std::span<float> v() { return {v_.data(), size_t(v_.size())}; }

 private:
  const kernels::Context& ctx_;
  const model::ParameterLayout& layout_;
  TrainConfig config_;
  int64_t begin_, end_;
  kernels::DeviceArray<float> m_, v_;
  int64_t steps_taken_ = 0;
};

}  // namespace tessera::train
