#pragma once

#include <span>
#include <vector>

#include "tessera/kernels/device.h"
#include "tessera/kernels/low_precision.h"
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
  // The same on f32 master weights whose parameters are kept in low precision: gradients in f32
  // or in bf16 (the other null) times grad_scale, and params_low, which points at element
  // `first` too, written with the updated weights in one pass (kernels::adamw_update_low).
  void update_low(int64_t first, int64_t n, float* master, const float* grads,
                  const uint16_t* grads_bf16, float grad_scale, double lr, uint16_t* params_low,
                  kernels::LowPrecision low);
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
  // Calls f(lo, hi, hyper) for each parameter's part of [first, first + n) with its
  // hyperparameters (weight decay only where the layout marks it).
  template <typename F>
  void for_each_parameter(int64_t first, int64_t n, double lr, F&& f) const;

  kernels::DeviceArray<float> m_, v_;
  int64_t steps_taken_ = 0;
};

}  // namespace tessera::train
