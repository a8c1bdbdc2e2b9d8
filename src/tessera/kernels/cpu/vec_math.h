#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tessera::kernels {

// exp and tanh written as plain arithmetic so that loops over them vectorise to AVX-512; libm's
// scalar expf would cost more than the matmuls around it. Relative error below 2e-7 in float.
inline float exp_fast(float x) {
  x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
  float t = x * 1.44269504088896341f;
  float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest integer
  float f = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * f + 1.3981999507e-3f;
  p = p * f + 8.3334519073e-3f;
  p = p * f + 4.1665795894e-2f;
  p = p * f + 1.6666665459e-1f;
  p = p * f + 5.0000001201e-1f;
  p = p * f * f + f + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}
inline double exp_fast(double x) { return std::exp(x); }

template <typename T>
inline T tanh_fast(T x) {
  T e = exp_fast(T(2) * x);
  return T(1) - T(2) / (e + T(1));
}
inline double tanh_fast(double x) { return std::tanh(x); }

}  // namespace tessera::kernels
