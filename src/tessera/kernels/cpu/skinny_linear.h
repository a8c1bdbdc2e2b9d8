// y[M, out] = x[M, in] * w[out, in]^T for few rows of x, as decoding runs every linear layer:
// reading w from memory is the whole cost, and a general GEMM (or one that first widens all of w)
// spends more than that. Each tile of four weight rows is read once and multiplied with every
// row of x while it sits in the L1 cache; sums accumulate in f32 and each output is one
// thread's, so results do not depend on the thread count or the schedule.
//
// A product policy says how one step of a dot product loads kStep elements of an x row and of a
// weight row and multiplies them into an f32 accumulator: Widened converts both operands to f32
// for FMAs; Bf16Pairs multiplies bf16 directly with AVX512_BF16's exact pairwise products.
#pragma once

#include <algorithm>
#include <cstdint>

#include "tessera/core/dtype.h"
#include "tessera/kernels/cpu/low_precision_convert.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define TESSERA_SKINNY_AVX512 1
#include <immintrin.h>
#endif

namespace tessera::kernels {

#ifdef TESSERA_SKINNY_AVX512

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
struct Int8Operand {
  using Element = int8_t;
  static __m512 load(__mmask16 k, const int8_t* p) {
    return _mm512_maskz_cvtepi32_ps(k, _mm512_maskz_cvtepi8_epi32(k, _mm_maskz_loadu_epi8(k, p)));
  }
};

template <typename W, typename X>
struct Widened {
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

#ifdef __AVX512BF16__
// One instruction per 32 products, against three per 16 when widening; bf16 subnormals count as
// zero, as in oneDNN's bf16 kernels.
struct Bf16Pairs {
  using WElement = uint16_t;
  using XElement = uint16_t;
  using WVec = __m512bh;
  using XVec = __m512bh;
  using Mask = __mmask32;
  static constexpr int64_t kStep = 32;
  static Mask mask(int64_t remaining) {
    return remaining >= 32 ? Mask(0xffffffffu) : Mask((uint64_t(1) << remaining) - 1);
  }
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
struct Int8Operand {
  using Element = int8_t;
  static float value(int8_t v) { return float(v); }
};

template <typename W, typename X>
struct Widened {
  using WElement = typename W::Element;
  using XElement = typename X::Element;
  static float product(XElement x, WElement w) { return X::value(x) * W::value(w); }
};
using Bf16Product = Widened<Bf16Operand, Bf16Operand>;

#endif

namespace skinny {

constexpr int kTileRows = 4;
// How far ahead each weight row is prefetched into L2. The hardware prefetchers alone left 40% of
// the bandwidth of a token's matmuls unused on the development machine (2-core Xeon VM); from
// one tile to 32 KiB ahead measured best.
constexpr int64_t kPrefetchBytes = 32 << 10;

#ifdef TESSERA_SKINNY_AVX512

inline float sum_lanes(__m512 v) {
  const __m512d d = _mm512_castps_pd(v);
  const __m256 half = _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, d, 0)),
                                    _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, d, 1)));
  __m128 quarter = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  quarter = _mm_add_ps(quarter, _mm_movehl_ps(quarter, quarter));
  return _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)));
}

// dots[m][r] = x row m . w row r over `in` columns, for RM rows of x and kTileRows rows of w.
template <typename P, int RM>
void dot_tile(const typename P::XElement* const* x, const typename P::WElement* const* w,
              int64_t in, float dots[RM][kTileRows]) {
  __m512 acc[RM][kTileRows];
  for (int m = 0; m < RM; ++m) {
    for (int r = 0; r < kTileRows; ++r) acc[m][r] = _mm512_setzero_ps();
  }
  constexpr int64_t kWeightBytes = sizeof(typename P::WElement);
  for (int64_t c = 0; c < in; c += P::kStep) {
    const typename P::Mask k = P::mask(in - c);
    typename P::WVec wv[kTileRows];
    if (c * kWeightBytes % 64 < P::kStep * kWeightBytes) {  // once per cache line
      for (int r = 0; r < kTileRows; ++r) {
        _mm_prefetch(reinterpret_cast<const char*>(w[r] + c) + kPrefetchBytes, _MM_HINT_T1);
      }
    }
    for (int r = 0; r < kTileRows; ++r) wv[r] = P::load_w(k, w[r] + c);
    for (int m = 0; m < RM; ++m) {
      const typename P::XVec xv = P::load_x(k, x[m] + c);
      for (int r = 0; r < kTileRows; ++r) acc[m][r] = P::madd(acc[m][r], xv, wv[r]);
    }
  }
  for (int m = 0; m < RM; ++m) {
    for (int r = 0; r < kTileRows; ++r) dots[m][r] = sum_lanes(acc[m][r]);
  }
}

#else

template <typename P, int RM>
void dot_tile(const typename P::XElement* const* x, const typename P::WElement* const* w,
              int64_t in, float dots[RM][kTileRows]) {
  for (int m = 0; m < RM; ++m) {
    for (int r = 0; r < kTileRows; ++r) {
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t c = 0; c < in; ++c) sum += P::product(x[m][c], w[r][c]);
      dots[m][r] = sum;
    }
  }
}

#endif

// Rows [row, row + RM) of y against weight rows [r0, r0 + kTileRows). Past the last row of w or
// of x, a tile repeats the last one and drops its results, so every tile runs the same code.
template <typename P, int RM>
void tile(const typename P::XElement* x, const typename P::WElement* w, const float* row_scales,
          const float* b, float* y, int64_t M, int64_t in, int64_t out, int64_t row, int64_t r0) {
  const typename P::XElement* xs[RM];
  const typename P::WElement* ws[kTileRows];
  for (int m = 0; m < RM; ++m) xs[m] = x + std::min(row + m, M - 1) * in;
  for (int r = 0; r < kTileRows; ++r) ws[r] = w + std::min(r0 + r, out - 1) * in;
  float dots[RM][kTileRows];
  dot_tile<P, RM>(xs, ws, in, dots);
  for (int m = 0; m < RM && row + m < M; ++m) {
    float* y_row = y + (row + m) * out;
    for (int r = 0; r < kTileRows && r0 + r < out; ++r) {
      const float scaled = row_scales != nullptr ? dots[m][r] * row_scales[r0 + r] : dots[m][r];
      y_row[r0 + r] = b != nullptr ? scaled + b[r0 + r] : scaled;
    }
  }
}

}  // namespace skinny

// y[M, out] = (x[M, in] * w[out, in]^T) * row_scales[out] + b[out], multiplied as the product
// policy P says; row_scales and b may be null.
template <typename P>
void skinny_linear(const typename P::XElement* x, const typename P::WElement* w,
                   const float* row_scales, const float* b, float* y, int64_t M, int64_t in,
                   int64_t out) {
  using skinny::tile;
  const int64_t tiles = (out + skinny::kTileRows - 1) / skinny::kTileRows;
  // Guided: a thread slowed by another process on its core hands its tiles to the others.
#pragma omp parallel for schedule(guided)
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t r0 = t * skinny::kTileRows;
    int64_t row = 0;
    for (; row + 4 <= M; row += 4) tile<P, 4>(x, w, row_scales, b, y, M, in, out, row, r0);
    switch (M - row) {
      case 1:
        tile<P, 1>(x, w, row_scales, b, y, M, in, out, row, r0);
        break;
      case 2:
        tile<P, 2>(x, w, row_scales, b, y, M, in, out, row, r0);
        break;
      case 3:
        tile<P, 4>(x, w, row_scales, b, y, M, in, out, row, r0);
        break;
    }
  }
}

}  // namespace tessera::kernels
