// The roundings between f32 and the bf16 / f16 bit patterns that the casts of low_precision.h
// promise, as integer arithmetic on the bits: one definition for the CPU's scalar path and the
// CUDA kernels (host and device code), so both give the same pattern for every input. Round to
// nearest even; a NaN stays a NaN, quieted, its payload truncated; f16 overflow gives inf;
// subnormals are kept.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TESSERA_HOST_DEVICE __host__ __device__
#else
#define TESSERA_HOST_DEVICE
#endif

namespace tessera::kernels::half_bits {

TESSERA_HOST_DEVICE inline uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

TESSERA_HOST_DEVICE inline float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

TESSERA_HOST_DEVICE inline uint16_t bf16_from_f32(float f) {
  uint32_t bits = bits_of(f);
  // Rounding would turn a NaN with its payload in the low half into inf: quiet and truncate it.
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

TESSERA_HOST_DEVICE inline float f32_from_bf16(uint16_t h) { return float_of(uint32_t(h) << 16); }

TESSERA_HOST_DEVICE inline uint16_t f16_from_f32(float f) {
  const uint32_t bits = bits_of(f);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // from 65520 up, the nearest even is inf
  if (a >= 0x38800000u) {                       // normal in f16: rebias the exponent by 112
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return sign | uint16_t((rounded - 0x38000000u) >> 13);
  }
  if (a < 0x33000000u) return sign;  // below 2^-25, which itself ties to zero
  // Subnormal in f16: count units of 2^-24 and round the dropped bits to nearest even.
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (a >> 23);
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return sign | uint16_t(q);
}

TESSERA_HOST_DEVICE inline float f32_from_f16(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) {  // inf, or NaN made quiet as the hardware conversion does
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return float_of(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0) return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = float(mantissa) * 0x1p-24f;  // zero or subnormal, exact
  return float_of(sign | bits_of(magnitude));
}

}  // namespace tessera::kernels::half_bits
