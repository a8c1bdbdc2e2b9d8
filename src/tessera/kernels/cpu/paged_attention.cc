#include "tessera/kernels/paged_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels {

int64_t paged_attention_scratch_size(int64_t max_context) { return max_context; }

namespace cpu {

namespace {

int64_t row_width(const PagedKv& kv) { return kv.kv_heads * kv.head_dim; }

// Offset of position p's row within a layer's k or v storage.
int64_t row_offset(const PagedKv& kv, const int32_t* block_table, int64_t p) {
  return (int64_t(block_table[p / kv.block_tokens]) * kv.block_tokens + p % kv.block_tokens) *
         row_width(kv);
}

// Causal attention of one query over positions [0, context) of key/value head g; S holds the
// scores while it runs.
void attend(const float* q, float* out, const PagedKv& kv, const int32_t* block_table,
            int64_t context, int64_t g, float* S) {
  const int64_t hd = kv.head_dim, W = row_width(kv), bt = kv.block_tokens;
  const float scale = 1.0f / std::sqrt(float(hd));
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t p0 = 0; p0 < context; p0 += bt) {
    const float* k = kv.k + int64_t(block_table[p0 / bt]) * bt * W + g * hd;
    const int64_t m = std::min(bt, context - p0);
    for (int64_t j = 0; j < m; ++j) {
      const float* kj = k + j * W;
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t d = 0; d < hd; ++d) dot += q[d] * kj[d];
      S[p0 + j] = scale * dot;
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
    const float* v = kv.v + int64_t(block_table[p0 / bt]) * bt * W + g * hd;
    const int64_t m = std::min(bt, context - p0);
    for (int64_t j = 0; j < m; ++j) {
      const float* vj = v + j * W;
      const float p = S[p0 + j];
#pragma omp simd
      for (int64_t d = 0; d < hd; ++d) out[d] += p * vj[d];
    }
  }
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t d = 0; d < hd; ++d) out[d] *= inv;
}

void paged_kv_write(const Context&, const float* k, const float* v, int64_t ld, const PagedKv& kv,
                    const PagedChunk& chunk) {
  const int64_t W = row_width(kv);
  for (int64_t i = 0; i < chunk.n; ++i) {
    const int64_t at = row_offset(kv, chunk.block_table, chunk.start + i);
    std::memcpy(kv.k + at, k + i * ld, sizeof(float) * W);
    std::memcpy(kv.v + at, v + i * ld, sizeof(float) * W);
  }
}

void paged_attention_forward(const Context&, const float* q, int64_t ldq, float* out, int64_t ldo,
                             const PagedKv& kv, const PagedChunk* chunks, int64_t num_chunks,
                             int64_t H, float* scratch, int64_t max_context) {
  check(kv.kv_heads > 0 && H % kv.kv_heads == 0,
        "paged attention: {} query heads cannot share {} key/value heads evenly", H, kv.kv_heads);
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
      attend(q + r * ldq + h * hd, out + r * ldo + h * hd, kv, chunk.block_table,
             chunk.start + i + 1, h / group, S);
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
