#include "tessera/kernels/paged_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__AVX512F__) || defined(__F16C__)
#include <immintrin.h>
#endif

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/q8_0.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels {

int64_t paged_attention_scratch_size(int64_t max_context) { return max_context; }

int64_t kv_row_bytes(KvDtype dtype, int64_t width) {
  if (dtype == KvDtype::kF32) return width * int64_t(sizeof(float));
  check(width % kQ8BlockSize == 0, "a q8_0 KV cache holds rows of whole blocks of {}, not {}",
        kQ8BlockSize, width);
  return width / kQ8BlockSize * kQ8BlockBytes;
}

namespace cpu {

namespace {

int64_t row_width(const PagedKv& kv) { return kv.kv_heads * kv.head_dim; }

// Position p's row of a layer's k or v storage, whose rows are row_bytes long.
uint8_t* row_at(void* storage, const PagedKv& kv, const int32_t* block_table, int64_t p,
                int64_t row_bytes) {
  return static_cast<uint8_t*>(storage) + kv_slot(block_table, kv.block_tokens, p) * row_bytes;
}

// How attention reads head g of a cached row (`row`: the row's first byte).
struct F32Rows {
  static const float* head(const uint8_t* row, int64_t g, int64_t hd) {
    return reinterpret_cast<const float*>(row) + g * hd;
  }
  static float dot(const float* q, const uint8_t* row, int64_t g, int64_t hd) {
    const float* k = head(row, g, hd);
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t d = 0; d < hd; ++d) dot += q[d] * k[d];
    return dot;
  }
  static void add(float* out, float p, const uint8_t* row, int64_t g, int64_t hd) {
    const float* v = head(row, g, hd);
#pragma omp simd
    for (int64_t d = 0; d < hd; ++d) out[d] += p * v[d];
  }
};

// A q8_0 row: per block, attention multiplies the block's int8 values, widened in registers, by
// the query scaled by the block's scale, and reduces once per position (a reduction per block
// and a call per f16 scale made the q8_0 cache decode 22% slower than f32 at 2048 positions).
struct Q8Rows {
  static const uint8_t* block(const uint8_t* row, int64_t g, int64_t hd, int64_t b) {
    return row + (g * hd / kQ8BlockSize + b) * kQ8BlockBytes;
  }
  static float scale(const uint8_t* block) {
    uint16_t half;
    std::memcpy(&half, block, sizeof half);
#ifdef __F16C__
    return _cvtsh_ss(half);
#else
    return f16_to_f32(half);
#endif
  }
  static const int8_t* values(const uint8_t* block) {
    return reinterpret_cast<const int8_t*>(block + 2);
  }
#ifdef __AVX512F__
  static __m512 widened(const int8_t* v) {
    // Masked forms: GCC 12 reports the unmasked ones' pass-through lanes as uninitialised.
    const __m512i wide =
        _mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(v)));
    return _mm512_maskz_cvtepi32_ps(0xffff, wide);
  }
  // _mm512_reduce_add_ps's sum, in the same order, from the masked extract.
  static float sum_of(__m512 v) {
    const __m512d halves = _mm512_castps_pd(v);
    const __m256 eight =
        _mm256_add_ps(_mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, halves, 1)),
                      _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xf, halves, 0)));
    __m128 four = _mm_add_ps(_mm256_extractf128_ps(eight, 1), _mm256_castps256_ps128(eight));
    four = _mm_add_ps(four, _mm_movehl_ps(four, four));
    return _mm_cvtss_f32(_mm_add_ss(four, _mm_movehdup_ps(four)));
  }
  static float dot(const float* q, const uint8_t* row, int64_t g, int64_t hd) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < hd / kQ8BlockSize; ++b) {
      const uint8_t* k = block(row, g, hd, b);
      const __m512 d = _mm512_set1_ps(scale(k));
      for (int64_t i = 0; i < kQ8BlockSize; i += 16) {
        const __m512 qs = _mm512_mul_ps(_mm512_loadu_ps(q + b * kQ8BlockSize + i), d);
        acc = _mm512_fmadd_ps(qs, widened(values(k) + i), acc);
      }
    }
    return sum_of(acc);
  }
  static void add(float* out, float p, const uint8_t* row, int64_t g, int64_t hd) {
    for (int64_t b = 0; b < hd / kQ8BlockSize; ++b) {
      const uint8_t* v = block(row, g, hd, b);
      const __m512 weight = _mm512_set1_ps(p * scale(v));
      for (int64_t i = 0; i < kQ8BlockSize; i += 16) {
        float* o = out + b * kQ8BlockSize + i;
        _mm512_storeu_ps(o, _mm512_fmadd_ps(weight, widened(values(v) + i), _mm512_loadu_ps(o)));
      }
    }
  }
#else
  static float dot(const float* q, const uint8_t* row, int64_t g, int64_t hd) {
    float dot = 0;
    for (int64_t b = 0; b < hd / kQ8BlockSize; ++b) {
      const uint8_t* k = block(row, g, hd, b);
      const int8_t* kv = values(k);
      const float* qb = q + b * kQ8BlockSize;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t d = 0; d < kQ8BlockSize; ++d) sum += qb[d] * float(kv[d]);
      dot += scale(k) * sum;
    }
    return dot;
  }
  static void add(float* out, float p, const uint8_t* row, int64_t g, int64_t hd) {
    for (int64_t b = 0; b < hd / kQ8BlockSize; ++b) {
      const uint8_t* v = block(row, g, hd, b);
      const int8_t* vv = values(v);
      const float weight = p * scale(v);
      float* ob = out + b * kQ8BlockSize;
#pragma omp simd
      for (int64_t d = 0; d < kQ8BlockSize; ++d) ob[d] += weight * float(vv[d]);
    }
  }
#endif
};

// Causal attention of one query over positions [0, context) of key/value head g; S holds the
// scores while it runs.
template <typename Rows>
void attend(const float* q, float* out, const PagedKv& kv, const int32_t* block_table,
            int64_t context, int64_t g, float* S) {
  const int64_t hd = kv.head_dim, bt = kv.block_tokens;
  const int64_t row_bytes = kv_row_bytes(kv.dtype, row_width(kv));
  const float scale = 1.0f / std::sqrt(float(hd));
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t p0 = 0; p0 < context; p0 += bt) {
    const uint8_t* k = row_at(kv.k, kv, block_table, p0, row_bytes);
    const int64_t m = std::min(bt, context - p0);
    for (int64_t j = 0; j < m; ++j) {
      S[p0 + j] = scale * Rows::dot(q, k + j * row_bytes, g, hd);
      max = std::max(max, S[p0 + j]);
    }
  }
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t p = 0; p < context; ++p) {
    S[p] = exp_fast(S[p] - max);
    sum += S[p];
  }
  std::memset(out, 0, sizeof(float) * hd);
  for (int64_t p0 = 0; p0 < context; p0 += bt) {
    const uint8_t* v = row_at(kv.v, kv, block_table, p0, row_bytes);
    const int64_t m = std::min(bt, context - p0);
    for (int64_t j = 0; j < m; ++j) Rows::add(out, S[p0 + j], v + j * row_bytes, g, hd);
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

void paged_kv_write(const Context&, const float* k, const float* v, int64_t ld, const PagedKv& kv,
                    const PagedChunk& chunk) {
  const int64_t W = row_width(kv), bytes = kv_row_bytes(kv.dtype, W);
  for (int64_t i = 0; i < chunk.n; ++i) {
    uint8_t* k_row = row_at(kv.k, kv, chunk.block_table, chunk.start + i, bytes);
    uint8_t* v_row = row_at(kv.v, kv, chunk.block_table, chunk.start + i, bytes);
    if (kv.dtype == KvDtype::kQ8_0) {
      quantize_q8_0({k + i * ld, size_t(W)}, {k_row, size_t(bytes)});
      quantize_q8_0({v + i * ld, size_t(W)}, {v_row, size_t(bytes)});
    } else {
      std::memcpy(k_row, k + i * ld, size_t(bytes));
      std::memcpy(v_row, v + i * ld, size_t(bytes));
    }
  }
}

void paged_attention_forward(const Context&, const float* q, int64_t ldq, float* out, int64_t ldo,
                             const PagedKv& kv, const PagedChunk* chunks, int64_t num_chunks,
                             int64_t H, float* scratch, int64_t max_context) {
  check(kv.kv_heads > 0 && H % kv.kv_heads == 0,
        "paged attention: {} query heads cannot share {} key/value heads evenly", H, kv.kv_heads);
  check(kv.dtype == KvDtype::kF32 || kv.head_dim % kQ8BlockSize == 0,
        "paged attention: a q8_0 cache needs heads of whole blocks of {} values, not {}",
        kQ8BlockSize, kv.head_dim);
  for (int64_t c = 0; c < num_chunks; ++c) {
    check(chunks[c].start + chunks[c].n <= max_context,
          "paged attention: chunk {} reaches position {}, past the scratch's context of {}", c,
          chunks[c].start + chunks[c].n, max_context);
  }
  const int64_t group = H / kv.kv_heads, hd = kv.head_dim;
  double products = 0;  // query-key pairs
  for (int64_t c = 0; c < num_chunks; ++c) {
    products += double(chunks[c].n) * double(chunks[c].start + (chunks[c].n + 1) / 2.0);
  }
  const OpScope scope(OpClass::kAttention, 4.0 * double(H * hd) * products, 0);
#pragma omp parallel for schedule(dynamic)
  for (int64_t ch = 0; ch < num_chunks * H; ++ch) {
    const PagedChunk& chunk = chunks[ch / H];
    const int64_t h = ch % H;
    float* S = scratch + omp_get_thread_num() * paged_attention_scratch_size(max_context);
    for (int64_t i = 0; i < chunk.n; ++i) {
      const int64_t r = chunk.row + i;
      (kv.dtype == KvDtype::kQ8_0 ? attend<Q8Rows>
                                  : attend<F32Rows>)(q + r * ldq + h * hd, out + r * ldo + h * hd,
                                                     kv, chunk.block_table, chunk.start + i + 1,
                                                     h / group, S);
    }
  }
}

}  // namespace

void add_paged_attention_kernels(Backend& backend) {
  backend.paged_kv_write = paged_kv_write;
  backend.paged_attention_forward = paged_attention_forward;
}

}  // namespace cpu

}  // namespace tessera::kernels
