#include "tessera/model/parameter_store.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/rng.h"

namespace tessera::model {

ResidentParameters::ResidentParameters(const ModelLayout& layout,
                                       std::optional<kernels::LowPrecision> low,
                                       bool with_gradients)
    : units_(layout.units),
      low_(low),
      params_(layout.params.total()),
      grads_(with_gradients ? layout.params.total() : 0),
      low_params_(low ? layout.params.total() : 0) {}

ParameterStore::Weights ResidentParameters::acquire(int64_t unit) {
  if (low_ && low_stale_) {
    kernels::cast_to_low(params_.data(), low_params_.data(), int64_t(params_.size()), *low_);
    low_stale_ = false;
  }
  const int64_t begin = units_[unit].begin;
  return {params_.data() + begin, low_ ? low_params_.data() + begin : nullptr};
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
