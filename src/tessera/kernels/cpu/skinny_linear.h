// y[M, out] = x[M, in] * w[out, in]^T for few rows of x, as decoding runs every linear layer:
// reading w from memory is the whole cost, and a general GEMM (or one that first widens all of w)
// spends more than that. Each tile of weight rows is read once and multiplied with every row of x
// while it sits in the L1 cache; each output has its own accumulator, summed over the columns in
// order whatever the tile's shape, and is one thread's, so results depend neither on the thread
// count nor on the number of rows of x.
//
// A product policy says how one step of a dot product loads kStep elements of an x row and of a
// weight row and multiplies them into its accumulator: Widened converts both operands to f32 for
// FMAs; Bf16Pairs multiplies bf16 directly with AVX512_BF16's exact pairwise products; Int8Pairs
// multiplies int8 weights by int8 activations (held as int16) into exact int32 sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/kernels/cpu/low_precision_convert.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define TESSERA_SKINNY_AVX512 1
#include <immintrin.h>
#endif

namespace tessera::kernels {

#ifdef TESSERA_SKINNY_AVX512

inline float sum_lanes(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  const __m256 half = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, d, 0)),
                                    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, d, 1)));
  __m128 quarter = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  quarter = _mm_add_ps(quarter, _mm_movehl_ps(quarter, quarter));
  return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
}

// Sixteen f32 sums, added up at the end.
struct F32Sums {
  using Acc = __m512;
  static Acc zero() { return _mm512_setzero_ps(); }
  static float total(Acc a) { return sum_lanes(a); }
};

// Operand formats and how sixteen of their elements widen to f32. As in low_precision_convert.h,
// masked forms throughout: the unmasked ones' undefined pass-through lanes make GCC 12 report
// uninitialised values.
struct F32Operand {
  using Element = float;
  static __m512 load(__mmask16 k, const float* p) { return _mm512_maskz_loadu_ps(k, p); }
};
struct Bf16Operand {
  using Element = uint16_t;
  static __m512 load(__mmask16 k, const uint16_t* p) {
    const __m512i wide = _mm512_maskz_cvtepu16_epi32(k, _mm256_maskz_loadu_epi16(k, p));
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(k, wide, 16));
  }
};
struct F16Operand {
  using Element = uint16_t;
  static __m512 load(__mmask16 k, const uint16_t* p) {
    return _mm512_maskz_cvtph_ps(k, _mm256_maskz_loadu_epi16(k, p));
  }
};
template <typename W, typename X>
struct Widened : F32Sums {
  using WElement = typename W::Element;
  using XElement = typename X::Element;
  using WVec = __m512;
  using XVec = __m512;
  using Mask = __mmask16;
  static constexpr int64_t kStep = 16;
  static Mask mask(int64_t remaining) {
    return remaining >= 16 ? Mask(0xffff) : Mask((1u << remaining) - 1);
  }
  static WVec load_w(Mask k, const WElement* p) { return W::load(k, p); }
  static XVec load_x(Mask k, const XElement* p) { return X::load(k, p); }
  static __m512 madd(__m512 acc, XVec x, WVec w) { return _mm512_fmadd_ps(x, w, acc); }
};

// Steps of 32 sixteen-bit lanes.
struct Lanes32 {
  using Mask = __mmask32;
  static constexpr int64_t kStep = 32;
  static Mask mask(int64_t remaining) {
    return remaining >= 32 ? Mask(0xffffffffu) : Mask((uint64_t(1) << remaining) - 1);
  }
};

#ifdef __AVX512BF16__
// One instruction per 32 products, against three per 16 when widening; bf16 subnormals count as
// zero, as in oneDNN's bf16 kernels.
struct Bf16Pairs : F32Sums, Lanes32 {
  using WElement = uint16_t;
  using XElement = uint16_t;
  using WVec = __m512bh;
  using XVec = __m512bh;
  static __m512bh load(Mask k, const uint16_t* p) {
    return __m512bh(_mm512_maskz_loadu_epi16(k, p));
  }
  static WVec load_w(Mask k, const uint16_t* p) { return load(k, p); }
  static XVec load_x(Mask k, const uint16_t* p) { return load(k, p); }
  static __m512 madd(__m512 acc, XVec x, WVec w) { return _mm512_dpbf16_ps(acc, x, w); }
};
using Bf16Product = Bf16Pairs;
#else
using Bf16Product = Widened<Bf16Operand, Bf16Operand>;
#endif

// Pairs of int8 weights (sign-extended on load) and int16 activations multiplied and added into
// sixteen int32 sums, exactly: VPDPWSSD with AVX512_VNNI, VPMADDWD and an add without.
struct Int8Pairs : Lanes32 {
  using WElement = int8_t;
  using XElement = int16_t;
  using WVec = __m512i;
  using XVec = __m512i;
  using Acc = __m512i;
  static WVec load_w(Mask k, const int8_t* p) {
    return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(k, p));
  }
  static XVec load_x(Mask k, const int16_t* p) { return _mm512_maskz_loadu_epi16(k, p); }
  static Acc madd(Acc acc, XVec x, WVec w) {
#ifdef __AVX512VNNI__
    return _mm512_dpwssd_epi32(acc, x, w);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(x, w));
#endif
  }
  static Acc zero() { return _mm512_setzero_si512(); }
  static float total(Acc a) {
    const __m256i half = _mm256_add_epi32(_mm512_maskz_extracti64x4_epi64(0xf, a, 0),
                                          _mm512_maskz_extracti64x4_epi64(0xf, a, 1));
    __m128i quarter =
        _mm_add_epi32(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
    quarter = _mm_add_epi32(quarter, _mm_shuffle_epi32(quarter, 0x4e));
    quarter = _mm_add_epi32(quarter, _mm_shuffle_epi32(quarter, 0xb1));
    return float(_mm_cvtsi128_si32(quarter));
  }
};

#else  // portable: scalar widening that the compiler vectorises

struct F32Operand {
  using Element = float;
  static float value(float v) { return v; }
};
struct Bf16Operand {
  using Element = uint16_t;
  static float value(uint16_t v) { return bf16_to_f32(v); }
};
struct F16Operand {
  using Element = uint16_t;
  static float value(uint16_t v) { return f16_to_f32(v); }
};
template <typename W, typename X>
struct Widened {
  using WElement = typename W::Element;
  using XElement = typename X::Element;
  using Sum = float;
  static float product(XElement x, WElement w) { return X::value(x) * W::value(w); }
};
using Bf16Product = Widened<Bf16Operand, Bf16Operand>;

struct Int8Pairs {
  using WElement = int8_t;
  using XElement = int16_t;
  using Sum = int32_t;
  static int32_t product(int16_t x, int8_t w) { return int32_t(x) * int32_t(w); }
};

#endif

// The scales of an int8 product: one per x row, one per weight row.
struct Int8Scales {
  const float* x;
  const float* w;
};

// An int8 product's output from its exact integer sum (converted to f32): the same expression on
// every path, one rounding for the product of the scales and one fused multiply-add.
inline float int8_output(float sum, float x_scale, float w_scale, float bias) {
  return std::fma(sum, x_scale * w_scale, bias);
}

namespace skinny {

// Weight rows per tile when x has several rows: each weight vector loaded serves them all. A single
// row of x takes one weight row at a time, so that each thread reads its weights as one sequential
// stream: four interleaved row streams ran 17-24% slower in bf16 and f32 on Zen 5. Not int8, whose
// rows are half as long: there the tile's final sums cost more than the stream gains (25% slower).
constexpr int kTileRows = 4;
// How far ahead each weight row is prefetched into L2. The hardware prefetchers alone left 40% of
// the bandwidth of a token's matmuls unused on the development machine (2-core Xeon VM); from
// one tile to 32 KiB ahead measured best.
constexpr int64_t kPrefetchBytes = 32 << 10;

#ifdef TESSERA_SKINNY_AVX512

// dots[m][r] = x row m . w row r over `in` columns, for RM rows of x and RW rows of w.
template <typename P, int RM, int RW>
void dot_tile(const typename P::XElement* const* x, const typename P::WElement* const* w,
              int64_t in, float dots[RM][RW]) {
  typename P::Acc acc[RM][RW];
  for (int m = 0; m < RM; ++m) {
    for (int r = 0; r < RW; ++r) acc[m][r] = P::zero();
  }
  constexpr int64_t kWeightBytes = sizeof(typename P::WElement);
  for (int64_t c = 0; c < in; c += P::kStep) {
    const typename P::Mask k = P::mask(in - c);
    typename P::WVec wv[RW];
    if (c * kWeightBytes % 64 < P::kStep * kWeightBytes) {  // once per cache line
      for (int r = 0; r < RW; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(w[r] + c) + kPrefetchBytes, _MM_HINT_T1);
      }
    }
    for (int r = 0; r < RW; ++r) wv[r] = P::load_w(k, w[r] + c);
    for (int m = 0; m < RM; ++m) {
      const typename P::XVec xv = P::load_x(k, x[m] + c);
      for (int r = 0; r < RW; ++r) acc[m][r] = P::madd(acc[m][r], xv, wv[r]);
    }
  }
  for (int m = 0; m < RM; ++m) {
    for (int r = 0; r < RW; ++r) dots[m][r] = P::total(acc[m][r]);
  }
}

#else

template <typename P, int RM, int RW>
void dot_tile(const typename P::XElement* const* x, const typename P::WElement* const* w,
              int64_t in, float dots[RM][RW]) {
  for (int m = 0; m < RM; ++m) {
    for (int r = 0; r < RW; ++r) {
      typename P::Sum sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < in; ++c) sum += P::product(x[m][c], w[r][c]);
      dots[m][r] = float(sum);
    }
  }
}

#endif

// Rows [row, row + RM) of y against weight rows [r0, r0 + RW). Past the last row of w or of x, a
// tile repeats the last one and drops its results, so every tile runs the same code.
template <typename P, int RM, int RW = kTileRows>
void tile(const typename P::XElement* x, const typename P::WElement* w, const Int8Scales* scales,
          const float* b, float* y, int64_t M, int64_t in, int64_t out, int64_t row, int64_t r0) {
  const typename P::XElement* xs[RM];
  const typename P::WElement* ws[RW];
  for (int m = 0; m < RM; ++m) xs[m] = x + std::min(row + m, M - 1) * in;
  for (int r = 0; r < RW; ++r) ws[r] = w + std::min(r0 + r, out - 1) * in;
  float dots[RM][RW];
  dot_tile<P, RM, RW>(xs, ws, in, dots);
  for (int m = 0; m < RM && row + m < M; ++m) {
    float* y_row = y + (row + m) * out;
    for (int r = 0; r < RW && r0 + r < out; ++r) {
      const float d = dots[m][r];
      const float bias = b != nullptr ? b[r0 + r] : 0.0f;
      y_row[r0 + r] = scales != nullptr
                          ? int8_output(d, scales->x[row + m], scales->w[r0 + r], bias)
                          : (b != nullptr ? d + bias : d);
    }
  }
}

}  // namespace skinny

// y[M, out] = x[M, in] * w[out, in]^T + b[out], multiplied as the product policy P says; b may be
// null. With int8 scales, each integer sum becomes int8_output(sum, x scale, w scale, b).
template <typename P>
void skinny_linear(const typename P::XElement* x, const typename P::WElement* w,
                   const Int8Scales* scales, const float* b, float* y, int64_t M, int64_t in,
                   int64_t out) {
  using skinny::tile;
  // Static: each thread's rows are one contiguous block of w. Guided chunks interleaved the
  // threads' reads and ran up to 20% slower on Zen 5, even with the machine shared.
  if (M == 1 && sizeof(typename P::WElement) >= 2) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < out; ++r) tile<P, 1, 1>(x, w, scales, b, y, M, in, out, 0, r);
    return;
  }
  const int64_t tiles = (out + skinny::kTileRows - 1) / skinny::kTileRows;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r0 = t * skinny::kTileRows;
    int64_t row = 0;
    for (; row + 4 <= M; row += 4) tile<P, 4>(x, w, scales, b, y, M, in, out, row, r0);
    switch (M - row) {
      case 1:
        tile<P, 1>(x, w, scales, b, y, M, in, out, row, r0);
        break;
      case 2:
        tile<P, 2>(x, w, scales, b, y, M, in, out, row, r0);
        break;
      case 3:
        tile<P, 4>(x, w, scales, b, y, M, in, out, row, r0);
        break;
    }
  }
}

}  // namespace tessera::kernels
