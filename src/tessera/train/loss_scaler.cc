#include "tessera/train/loss_scaler.h"

#include <algorithm>

namespace tessera::train {

namespace {
// f16's largest finite value is 65504; a scale this small no longer helps anything.
constexpr double kMinScale = 1.0;
constexpr double kMaxScale = 16777216.0;
}  // namespace

DynamicLossScaler::DynamicLossScaler(double initial_scale, int64_t growth_interval)
    : scale_(initial_scale), growth_interval_(growth_interval) {}

bool DynamicLossScaler::update(bool grads_finite) {
  if (!grads_finite) {
    scale_ = std::max(kMinScale, scale_ / 2);
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_steps_ >= growth_interval_) {
    scale_ = std::min(kMaxScale, scale_ * 2);
    clean_steps_ = 0;
  }
  return true;
}

bool DynamicLossScaler::at_floor() const { return scale_ <= kMinScale; }

void DynamicLossScaler::restore(double scale, int64_t skipped) {
  scale_ = scale;
  skipped_ = skipped;
  clean_steps_ = 0;
}

}  // namespace tessera::train
