// Single-threaded conversions between f32 and bf16/f16 bit patterns, shared by the parallel casts
// and by gemm_low's portable path, which widens matrices row by row.
//
// bf16 rounding is integer arithmetic on the f32 bits rather than AVX512_BF16's vcvtneps2bf16,
// which flushes f32 subnormals to zero: this way every build, the vector body and the scalar
// fallback all give half_bits' bit patterns. With AVX-512 the array tail goes through
// the vector code under a mask, so no element takes a different route.
#pragma once

#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/kernels/half_bits.h"
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

inline void to_low_serial(const float* x, uint16_t* y, int64_t n, LowPrecision p) {
  if (p == LowPrecision::kBf16) {
    for (int64_t i = 0; i < n; ++i) y[i] = half_bits::bf16_from_f32(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = half_bits::f16_from_f32(x[i]);
  }
}

inline void from_low_serial(const uint16_t* x, float* y, int64_t n, LowPrecision p) {
  if (p == LowPrecision::kBf16) {
    for (int64_t i = 0; i < n; ++i) y[i] = half_bits::f32_from_bf16(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = half_bits::f32_from_f16(x[i]);
  }
}

#endif

}  // namespace tessera::kernels
