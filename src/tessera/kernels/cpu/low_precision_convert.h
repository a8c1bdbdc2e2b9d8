// Single-threaded conversions between f32 and bf16/f16 bit patterns, shared by the parallel casts
// and by gemm_low's portable path, which widens matrices row by row.
//
// bf16 rounding is integer arithmetic on the f32 bits rather than AVX512_BF16's vcvtneps2bf16,
// which flushes f32 subnormals to zero: this way every build, the vector body and the scalar
// fallback all give tessera::f32_to_bf16's bit pattern. With AVX-512 the array tail goes through
// the vector code under a mask, so no element takes a different route.
#pragma once

#include <bit>
#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/kernels/low_precision.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define TESSERA_LOW_PRECISION_AVX512 1
#include <immintrin.h>
#endif

namespace tessera::kernels {

#ifdef TESSERA_LOW_PRECISION_AVX512

inline __mmask16 tail_mask(int64_t remaining) {
  return remaining >= 16 ? __mmask16(0xffff) : __mmask16((1u << remaining) - 1);
}

// Every step runs under the tail mask: the unmasked forms' undefined pass-through lanes make
// GCC 12 report uninitialised values.
inline __m256i bf16_from_f32x16(__mmask16 m, __m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(m, bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  // Rounding would turn a NaN with its payload in the low half into inf; NaNs are quieted and
  // truncated instead.
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  rounded = _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
  return _mm512_maskz_cvtepi32_epi16(m, _mm512_maskz_srli_epi32(m, rounded, 16));
}

inline void to_low_serial(const float* x, uint16_t* y, int64_t n, LowPrecision p) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m256i h =
        p == LowPrecision::kBf16
            ? bf16_from_f32x16(m, v)
            : _mm512_maskz_cvtps_ph(m, v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm256_mask_storeu_epi16(y + i, m, h);
  }
}

inline void from_low_serial(const uint16_t* x, float* y, int64_t n, LowPrecision p) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, x + i);
    const __m512 v =
        p == LowPrecision::kBf16
            ? _mm512_castsi512_ps(_mm512_maskz_slli_epi32(m, _mm512_maskz_cvtepu16_epi32(m, h), 16))
            : _mm512_maskz_cvtph_ps(m, h);
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

#else

inline uint16_t f32_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // from 65520 up, the nearest even is inf
  if (a >= 0x38800000u) {                       // normal in f16: rebias the exponent by 112
    const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (a < 0x33000000u) return sign;  // below 2^-25, which itself ties to zero
  // Subnormal in f16: count units of 2^-24 and round the dropped bits to nearest even.
  const uint32_t significand = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - (a >> 23);
  uint32_t q = significand >> shift;
  const uint32_t rest = significand & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) {  // inf, or NaN made quiet as the hardware conversion does
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (mantissa << 13));
  }
  if (exponent != 0)
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;  // zero or subnormal, exact
  return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
}

inline void to_low_serial(const float* x, uint16_t* y, int64_t n, LowPrecision p) {
  if (p == LowPrecision::kBf16) {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
  }
}

inline void from_low_serial(const uint16_t* x, float* y, int64_t n, LowPrecision p) {
  if (p == LowPrecision::kBf16) {
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
  }
}

#endif

}  // namespace tessera::kernels
