#include "tessera/model/parameter_store.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/rng.h"

namespace tessera::model {

ResidentParameters::ResidentParameters(const kernels::Context& ctx, const ModelLayout& layout,
                                       std::optional<kernels::LowPrecision> low,
                                       bool with_gradients)
    : ctx_(ctx),
      units_(layout.units),
      low_(low),
      params_(layout.params.total()),
      low_params_(ctx, low ? layout.params.total() : 0),
      grads_(ctx, with_gradients ? layout.params.total() : 0) {
  if (ctx.on_cuda()) device_params_ = kernels::DeviceArray<float>(ctx, layout.params.total());
}

ParameterStore::Weights ResidentParameters::acquire(int64_t unit) {
  const float* read = ctx_.on_cuda() ? device_params_.data() : params_.data();
  if (stale_) {
    const int64_t n = int64_t(params_.size());
    if (ctx_.on_cuda()) {
      kernels::copy_to_device(ctx_, device_params_.data(), params_.data(), sizeof(float) * n);
    }
    if (low_) kernels::cast_to_low(ctx_, read, low_params_.data(), n, *low_);
    stale_ = false;
  }
  const int64_t begin = units_[unit].begin;
  return {read + begin, low_ ? low_params_.data() + begin : nullptr};
}

void initial_parameters(const ModelLayout& layout, uint64_t seed, int64_t begin, int64_t end,
                        float* out) {
  std::fill(out, out + (end - begin), 0.0f);
  for (const ParamInfo& p : layout.params.entries()) {
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.shape.numel());
    if (lo >= hi) continue;
    float* w = out + (lo - begin);
    if (p.init_std == 0) {
      std::fill(w, w + (hi - lo), float(p.init_value));
      continue;
    }
    const CounterRng rng(seed, uint64_t(p.global_index));
    const Placement& place = p.placement;
#pragma omp parallel for schedule(static)
    for (int64_t j = lo; j < hi; ++j) {
      const int64_t g = place.global_index(j - p.offset);
      w[j - lo] = g < 0 ? 0.0f : float(p.init_std * rng.normal(g));
    }
  }
}

}  // namespace tessera::model
