// The lane policies of the 4-bit linear kernels (q4_linear.cc, q4k_linear.cc): how a run of a
// repacked group's rows, one per lane, loads its nibbles, multiplies them by four int8 activations
// into exact int32 sums, and scales a block's sums into its f32 outputs. The lanes are the group's
// 16 rows at once (AVX-512), eight of them (AVX2) or one (portable); each lane computes the same
// integers and the same f32 operations, so every path gives the same bits.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessera/core/dtype.h"

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace tessera::kernels::q4 {

inline int32_t load_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define TESSERA_Q4_LANES 16
struct Lanes {
  static constexpr int kLanes = 16;
  static constexpr const char* kPath =
      "AVX-512"
#ifdef __AVX512VNNI__
      " VNNI (VPDPBUSD)";
#else
      " (VPMADDUBSW)";
#endif
  using Int = __m512i;
  using Float = __m512;
  static Int zero_int() { return _mm512_setzero_si512(); }
  static Float zero_float() { return _mm512_setzero_ps(); }
  static Int load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static Int add(Int a, Int b) { return _mm512_add_epi32(a, b); }
  static Int low(Int v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
  static Int high(Int v) {
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f));
  }
  static Int dot(Int acc, Int u, int32_t x4) {
#ifdef __AVX512VNNI__
    return _mm512_dpbusd_epi32(acc, u, _mm512_set1_epi32(x4));
#else
    const __m512i pairs = _mm512_maddubs_epi16(u, _mm512_set1_epi32(x4));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(pairs, _mm512_set1_epi16(1)));
#endif
  }
  static Float scales(const uint16_t* p) {
    return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static Float add_block(Float acc, Int sums, int32_t offset, float x_scale, Float w_scales) {
    const __m512 sum =
        _mm512_maskz_cvtepi32_ps(0xffff, _mm512_sub_epi32(sums, _mm512_set1_epi32(offset)));
    return _mm512_fmadd_ps(sum, _mm512_mul_ps(w_scales, _mm512_set1_ps(x_scale)), acc);
  }
  // acc + sums times the lanes' rows' 8-bit scales (Q4_K).
  static Int scale_sum(Int acc, Int sums, const uint8_t* scales) {
    const __m512i s = _mm512_maskz_cvtepu8_epi32(
        0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    return _mm512_add_epi32(acc, _mm512_mullo_epi32(sums, s));
  }
  // acc + the lanes' rows' two 8-bit mins times two int16 sums of activations (Q4_K).
  static Int min_dot(Int acc, const uint8_t* mins, int32_t sum_pair) {
    const __m512i m = _mm512_maskz_cvtepu8_epi16(
        ~__mmask32(0), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mins)));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(m, _mm512_set1_epi32(sum_pair)));
  }
  // acc + a super-block's sums times d, less its mins' sums times dmin, scaled by x's (Q4_K).
  static Float add_super_block(Float acc, Int sums, Int mins, float x_scale, const uint16_t* d,
                               const uint16_t* dmin) {
    const __m512 xs = _mm512_set1_ps(x_scale);
    acc =
        _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, sums), _mm512_mul_ps(scales(d), xs), acc);
    return _mm512_fnmadd_ps(_mm512_maskz_cvtepi32_ps(0xffff, mins), _mm512_mul_ps(scales(dmin), xs),
                            acc);
  }
  static void store(float* y, Float acc, const float* b, int n) {
    const __mmask16 k = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
    const __m512 bias = b != nullptr ? _mm512_maskz_loadu_ps(k, b) : _mm512_setzero_ps();
    _mm512_mask_storeu_ps(y, k, _mm512_add_ps(acc, bias));
  }
};
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#define TESSERA_Q4_LANES 8
struct Lanes {
  static constexpr int kLanes = 8;
  static constexpr const char* kPath =
      "AVX2"
#ifdef __AVXVNNI__
      " VNNI (VPDPBUSD)";
#else
      " (VPMADDUBSW)";
#endif
  using Int = __m256i;
  using Float = __m256;
  static Int zero_int() { return _mm256_setzero_si256(); }
  static Float zero_float() { return _mm256_setzero_ps(); }
  static Int load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const Int*>(p)); }
  static Int add(Int a, Int b) { return _mm256_add_epi32(a, b); }
  static Int low(Int v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
  static Int high(Int v) {
    return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f));
  }
  static Int dot(Int acc, Int u, int32_t x4) {
#ifdef __AVXVNNI__
    return _mm256_dpbusd_avx_epi32(acc, u, _mm256_set1_epi32(x4));
#else
    const __m256i pairs = _mm256_maddubs_epi16(u, _mm256_set1_epi32(x4));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
#endif
  }
  static Float scales(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static Float add_block(Float acc, Int sums, int32_t offset, float x_scale, Float w_scales) {
    const __m256 sum = _mm256_cvtepi32_ps(_mm256_sub_epi32(sums, _mm256_set1_epi32(offset)));
    return _mm256_fmadd_ps(sum, _mm256_mul_ps(w_scales, _mm256_set1_ps(x_scale)), acc);
  }
  static Int scale_sum(Int acc, Int sums, const uint8_t* scales) {
    const __m256i s =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales)));
    return _mm256_add_epi32(acc, _mm256_mullo_epi32(sums, s));
  }
  static Int min_dot(Int acc, const uint8_t* mins, int32_t sum_pair) {
    const __m256i m = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mins)));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(m, _mm256_set1_epi32(sum_pair)));
  }
  static Float add_super_block(Float acc, Int sums, Int mins, float x_scale, const uint16_t* d,
                               const uint16_t* dmin) {
    const __m256 xs = _mm256_set1_ps(x_scale);
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(scales(d), xs), acc);
    return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_mul_ps(scales(dmin), xs), acc);
  }
  static void store(float* y, Float acc, const float* b, int n) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, acc);
    for (int l = 0; l < n; ++l) y[l] = lanes[l] + (b != nullptr ? b[l] : 0.0f);
  }
};
#else
#define TESSERA_Q4_LANES 1
struct Lanes {
  static constexpr int kLanes = 1;
  static constexpr const char* kPath = "portable (scalar)";
  using Int = int32_t;
  using Float = float;
  static Int zero_int() { return 0; }
  static Float zero_float() { return 0.0f; }
  static Int load(const uint8_t* p) { return load_i32(p); }
  static Int add(Int a, Int b) { return a + b; }
  static Int low(Int v) { return v & 0x0f0f0f0f; }
  static Int high(Int v) { return int32_t(uint32_t(v) >> 4) & 0x0f0f0f0f; }
  static Int dot(Int acc, Int u, int32_t x4) {
    for (int i = 0; i < 4; ++i) {
      acc += int32_t(uint8_t(uint32_t(u) >> (8 * i))) * int32_t(int8_t(uint32_t(x4) >> (8 * i)));
    }
    return acc;
  }
  static Float scales(const uint16_t* p) { return f16_to_f32(*p); }
  static Float add_block(Float acc, Int sums, int32_t offset, float x_scale, Float w_scales) {
    return std::fma(float(sums - offset), w_scales * x_scale, acc);
  }
  static Int scale_sum(Int acc, Int sums, const uint8_t* scales) { return acc + sums * *scales; }
  static Int min_dot(Int acc, const uint8_t* mins, int32_t sum_pair) {
    return acc + mins[0] * int16_t(uint32_t(sum_pair)) +
           mins[1] * int16_t(uint32_t(sum_pair) >> 16);
  }
  static Float add_super_block(Float acc, Int sums, Int mins, float x_scale, const uint16_t* d,
                               const uint16_t* dmin) {
    acc = std::fma(float(sums), f16_to_f32(*d) * x_scale, acc);
    return std::fma(-float(mins), f16_to_f32(*dmin) * x_scale, acc);
  }
  static void store(float* y, Float acc, const float* b, int) {
    *y = acc + (b != nullptr ? *b : 0.0f);
  }
};
#endif

}  // namespace tessera::kernels::q4
