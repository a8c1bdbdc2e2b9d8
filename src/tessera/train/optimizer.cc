#include "tessera/train/optimizer.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::train {

AdamW::AdamW(const kernels::Context& ctx, const model::ParameterLayout& layout,
             const TrainConfig& config, int64_t begin, int64_t end)
    : ctx_(ctx),
      layout_(layout),
      config_(config),
      begin_(begin),
      end_(end),
      m_(ctx, end - begin),
      v_(ctx, end - begin) {
  check(0 <= begin && begin <= end && end <= layout.total(),
        "optimizer range [{}, {}) outside the {} parameters", begin, end, layout.total());
}

template <typename F>
void AdamW::for_each_parameter(int64_t first, int64_t n, double lr, F&& f) const {
  const int64_t last = first + n;
  check(begin_ <= first && last <= end_, "update of [{}, {}) outside the optimizer's [{}, {})",
        first, last, begin_, end_);
  const auto& entries = layout_.entries();
  // The first entry that ends after `first`.
  auto it = std::partition_point(entries.begin(), entries.end(), [&](const model::ParamInfo& p) {
    return p.offset + p.shape.numel() <= first;
  });
  for (; it != entries.end() && it->offset < last; ++it) {
    const int64_t lo = std::max(first, it->offset);
    const int64_t hi = std::min(last, it->offset + it->shape.numel());
    f(lo, hi,
      kernels::AdamWParams{lr, config_.beta1, config_.beta2, config_.eps,
                           it->decay ? config_.weight_decay : 0.0, steps_taken_});
  }
}

void AdamW::update(int64_t first, int64_t n, float* params, const float* grads, double lr) {
  for_each_parameter(first, n, lr, [&](int64_t lo, int64_t hi, const kernels::AdamWParams& hp) {
    kernels::adamw_update<float>(ctx_, params + (lo - first), grads + (lo - first),
                                 m_.data() + (lo - begin_), v_.data() + (lo - begin_), hi - lo, hp);
  });
}

void AdamW::update_low(int64_t first, int64_t n, float* master, const float* grads,
                       const uint16_t* grads_bf16, float grad_scale, double lr,
                       uint16_t* params_low, kernels::LowPrecision low) {
  for_each_parameter(first, n, lr, [&](int64_t lo, int64_t hi, const kernels::AdamWParams& hp) {
    const int64_t at = lo - first;
    kernels::adamw_update_low(ctx_, master + at, grads != nullptr ? grads + at : nullptr,
                              grads_bf16 != nullptr ? grads_bf16 + at : nullptr, grad_scale,
                              m_.data() + (lo - begin_), v_.data() + (lo - begin_), hi - lo, hp,
                              params_low + at, low);
  });
}

}  // namespace tessera::train
