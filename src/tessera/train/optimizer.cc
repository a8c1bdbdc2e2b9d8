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

void AdamW::update(int64_t first, int64_t n, float* params, const float* grads, double lr) {
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
    const kernels::AdamWParams hp{lr,
                                  config_.beta1,
                                  config_.beta2,
                                  config_.eps,
                                  it->decay ? config_.weight_decay : 0.0,
                                  steps_taken_};
    kernels::adamw_update<float>(ctx_, params + (lo - first), grads + (lo - first),
                                 m_.data() + (lo - begin_), v_.data() + (lo - begin_), hi - lo, hp);
  }
}

}  // namespace tessera::train
