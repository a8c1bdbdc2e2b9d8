#include "tessera/model/parameter_store.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/rng.h"

namespace tessera::model {

std::vector<ParameterUnit> parameter_units(const ModelLayout& layout) {
  const int64_t total = layout.params.total();
  std::vector<ParameterUnit> units;
  units.push_back({0, layout.blocks.empty() ? total : layout.blocks.front().ln1_w});
  for (size_t l = 0; l < layout.blocks.size(); ++l) {
    const int64_t end = l + 1 < layout.blocks.size() ? layout.blocks[l + 1].ln1_w : total;
    units.push_back({layout.blocks[l].ln1_w, end});
  }
  return units;
}

ResidentParameters::ResidentParameters(const ModelLayout& layout,
                                       std::optional<kernels::LowPrecision> low,
                                       bool with_gradients)
    : units_(parameter_units(layout)),
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

void initial_parameters(const ModelConfig& config, const ModelLayout& layout, uint64_t seed,
                        int64_t begin, int64_t end, float* out) {
  std::fill(out, out + (end - begin), 0.0f);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.n_layer);
  const auto& entries = layout.params.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const ParamInfo& p = entries[i];
    const int64_t lo = std::max(begin, p.offset), hi = std::min(end, p.offset + p.shape.numel());
    if (lo >= hi) continue;
    float* w = out + (lo - begin);
    if (p.shape.rank() == 1) {
      const bool norm_gain = p.name.find("ln") != std::string::npos && p.name.ends_with(".weight");
      std::fill(w, w + (hi - lo), norm_gain ? 1.0f : 0.0f);
      continue;
    }
    const bool residual = p.name.ends_with("proj.weight") || p.name.ends_with("down.weight");
    const double std = residual ? residual_std : 0.02;
    const CounterRng rng(seed, i);
#pragma omp parallel for schedule(static)
    for (int64_t j = lo; j < hi; ++j) w[j - lo] = float(std * rng.normal(j - p.offset));
  }
}

}  // namespace tessera::model
