// The frequencies of rotary position embeddings: within a head of hd channels, pair i turns by
// pos * rope_inverse_frequency(rope, i, hd). Plain RoPE: theta^(-2i/hd). Scaled for contexts
// longer than the model was trained at, as Hugging Face's rope_scaling states it: linear divides
// every frequency by factor (positions interpolated); llama3 (Llama 3.1) divides those whose
// wavelength 2 pi / f exceeds original_context / low_freq_factor by factor, keeps those whose
// wavelength is under original_context / high_freq_factor, and blends the band between; yarn
// (YaRN, as Transformers computes it) blends each frequency between f / factor and f by a linear
// ramp over the pairs that turn between beta_fast and beta_slow times within original_context,
// and multiplies cos and sin by an attention factor (by default 0.1 ln(factor) + 1). One
// definition for the CPU and the CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>

#include "tessera/core/enum_names.h"
#include "tessera/kernels/half_bits.h"

namespace tessera::kernels {

enum class RopeScalingType { kNone, kLinear, kLlama3, kYarn };
inline constexpr EnumName<RopeScalingType> kRopeScalingTypeNames[] = {
    {RopeScalingType::kNone, "none"},
    {RopeScalingType::kLinear, "linear"},
    {RopeScalingType::kLlama3, "llama3"},
    {RopeScalingType::kYarn, "yarn"}};
constexpr const auto& enum_names(RopeScalingType) { return kRopeScalingTypeNames; }

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_context = 8192;
  double beta_fast = 32, beta_slow = 1;
  double attention_factor = 0;  // yarn's; 0: 0.1 ln(factor) + 1
  // Spelled out: the CUDA kernels' headers are C++17.
  bool operator==(const RopeScaling& o) const {
    return type == o.type && factor == o.factor && low_freq_factor == o.low_freq_factor &&
           high_freq_factor == o.high_freq_factor && original_context == o.original_context &&
           beta_fast == o.beta_fast && beta_slow == o.beta_slow &&
           attention_factor == o.attention_factor;
  }
};

struct Rope {
  double theta = 1e4;
  RopeScaling scaling;
};

constexpr double kRopeTwoPi = 2.0 * 3.14159265358979323846;

// YaRN's pair index at which a frequency turns `turns` times within the original context.
TESSERA_HOST_DEVICE inline double yarn_pair(const Rope& rope, double turns, int64_t hd) {
  return double(hd) * log(double(rope.scaling.original_context) / (turns * kRopeTwoPi)) /
         (2.0 * log(rope.theta));
}

TESSERA_HOST_DEVICE inline double rope_inverse_frequency(const Rope& rope, int64_t i, int64_t hd) {
  const double f = pow(rope.theta, -2.0 * double(i) / double(hd));
  const RopeScaling& s = rope.scaling;
  if (s.type == RopeScalingType::kLinear) return f / s.factor;
  if (s.type == RopeScalingType::kYarn) {
    const double low = fmax(floor(yarn_pair(rope, s.beta_fast, hd)), 0.0);
    double high = fmin(ceil(yarn_pair(rope, s.beta_slow, hd)), double(hd - 1));
    if (high == low) high += 0.001;
    const double ramp = fmin(fmax((double(i) - low) / (high - low), 0.0), 1.0);
    return f / s.factor * ramp + f * (1.0 - ramp);
  }
  if (s.type != RopeScalingType::kLlama3) return f;
  const double wavelength = kRopeTwoPi / f, context = double(s.original_context);
  if (wavelength < context / s.high_freq_factor) return f;
  if (wavelength > context / s.low_freq_factor) return f / s.factor;
  const double smooth =
      (context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

// What cos and sin are multiplied by: yarn's attention factor, 1 otherwise.
TESSERA_HOST_DEVICE inline double rope_attention_factor(const Rope& rope) {
  const RopeScaling& s = rope.scaling;
  if (s.type != RopeScalingType::kYarn) return 1.0;
  if (s.attention_factor > 0) return s.attention_factor;
  return s.factor <= 1 ? 1.0 : 0.1 * log(s.factor) + 1.0;
}

}  // namespace tessera::kernels
