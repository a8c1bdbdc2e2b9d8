#include "tessera/core/dtype.h"

#include <bit>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera {

uint16_t f32_to_f16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7fffffffu;
  constexpr uint32_t kF32Infinity = 0xffu << 23;
  constexpr uint32_t kF16Overflow = (127u + 16u) << 23;  // 2^16: rounds to infinity and beyond
  constexpr uint32_t kF16MinNormal = 113u << 23;         // 2^-14
  if (magnitude >= kF16Overflow) {
    return sign | (magnitude > kF32Infinity ? 0x7e00u : 0x7c00u);
  }
  if (magnitude < kF16MinNormal) {
    // Adding 0.5 aligns the subnormal's bits at the bottom of the mantissa; the FPU's addition
    // rounds them to nearest even.
    constexpr uint32_t kAlign = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const float aligned = std::bit_cast<float>(magnitude) + std::bit_cast<float>(kAlign);
    return sign | uint16_t(std::bit_cast<uint32_t>(aligned) - kAlign);
  }
  const uint32_t odd = (magnitude >> 13) & 1u;
  magnitude += (uint32_t(15 - 127) << 23) + 0xfffu + odd;
  return sign | uint16_t(magnitude >> 13);
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) {
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));  // infinity or NaN
  }
  if (exponent != 0) {
    return std::bit_cast<float>(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
  }
  // Zero or subnormal: mantissa * 2^-24 is exact in f32.
  const float magnitude = std::ldexp(float(mantissa), -24);
  return sign != 0 ? -magnitude : magnitude;
}

}  // namespace tessera
