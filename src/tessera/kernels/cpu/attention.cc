#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

// Each task runs on one thread; its scores live only in that thread's scratch while the task
// runs, and the matmuls inside run single-threaded. Queries are taken kQueryBlock rows at a time
// against the keys from the first row's document start up to the block's last row, so the
// products skip what the causal mask drops: at 1024 positions they do 56% of the full T x T work,
// and less again over packed documents.
namespace {
constexpr int64_t kQueryBlock = 128;
}  // namespace

int64_t attention_scratch_size(int64_t T_) { return 2 * std::min(T_, kQueryBlock) * T_; }

namespace cpu {

namespace {

// The keys one block of query rows [i0, i0 + rows) of batch row b attends to, as columns of its
// scores: column c is key k0 + c. Row r sees columns [first(r), visible(r)): from its document's
// start (0 without documents) to itself.
struct QueryBlock {
  int64_t i0, rows, k0, keys;
  const int32_t* doc_start;  // of query i0, or null

  QueryBlock(int64_t b, int64_t i0_, int64_t end, int64_t T_, int64_t block, const int32_t* starts)
      : i0(i0_),
        rows(std::min(block, end - i0_)),
        k0(starts != nullptr ? starts[b * T_ + i0_] : 0),
        keys(i0_ + rows - k0),
        doc_start(starts != nullptr ? starts + b * T_ + i0_ : nullptr) {}
  int64_t first(int64_t r) const { return doc_start != nullptr ? doc_start[r] - k0 : 0; }
  int64_t visible(int64_t r) const { return i0 + r + 1 - k0; }
};

// The query rows computed, as ranges of positions [begin, end) each written from row `out` of
// out, lse and dout: the whole sequence, or the chunks of QueryChunks.
struct QueryRange {
  int64_t begin, end, out;
};
using QueryRanges = std::array<QueryRange, QueryChunks::kMaxChunks>;

int64_t query_ranges(const QueryChunks& q, int64_t T_, QueryRanges& ranges) {
  if (q.count == 0) {
    ranges[0] = {0, T_, 0};
    return 1;
  }
  check(q.count >= 1 && q.count <= QueryChunks::kMaxChunks && q.length >= 1,
        "attention: {} query chunks of {} rows (1 to {} chunks of at least one row)", q.count,
        q.length, QueryChunks::kMaxChunks);
  for (int64_t c = 0; c < q.count; ++c) {
    const int64_t begin = q.start[size_t(c)];
    check(begin >= (c == 0 ? 0 : ranges[size_t(c - 1)].end) && begin + q.length <= T_,
          "attention: query chunk {} at position {} of {} rows overlaps the one before it or "
          "ends past the sequence's {} positions",
          c, begin, q.length, T_);
    ranges[size_t(c)] = {begin, begin + q.length, c * q.length};
  }
  return q.count;
}

// P[r, c] = exp(S[r, c] - lse[r]) for the columns row r sees, and 0 in the others.
template <typename T>
void causal_probabilities(T* S, const T* lse, const QueryBlock& q) {
  for (int64_t r = 0; r < q.rows; ++r) {
    T* row = S + r * q.keys;
    const T shift = lse[r];
    const int64_t first = q.first(r), visible = q.visible(r);
    std::fill(row, row + first, T(0));
#pragma omp simd
    for (int64_t j = first; j < visible; ++j) row[j] = exp_fast(row[j] - shift);
    std::fill(row + visible, row + q.keys, T(0));
  }
}

void check_doc_starts(const int32_t* doc_start, int64_t B, int64_t T_) {
  if (doc_start == nullptr) return;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t* row = doc_start + b * T_;
    for (int64_t t = 0; t < T_; ++t) {
      check(row[t] >= 0 && row[t] <= t && (t == 0 || row[t] >= row[t - 1]),
            "attention: document start {} of position {} (row {}) is not a position at or before "
            "it that follows the previous one's",
            row[t], t, b);
    }
  }
}

void check_heads(int64_t H, int64_t KVH) {
  check(KVH > 0 && H % KVH == 0, "attention: {} query heads cannot share {} key/value heads evenly",
        H, KVH);
}

// Forward gives each (batch, query head) its own task. Backward groups the query heads that share
// a key/value head into one task instead, because they all add into the same dk and dv: one owner
// per dk/dv slice keeps backward race-free and its sums in a fixed order.
template <typename T>
void attention_forward(const Context& ctx, const T* qkv, T* out, T* lse, T* scratch, int64_t B,
                       int64_t T_, int64_t H, int64_t KVH, int64_t hd, const int32_t* doc_start,
                       const QueryChunks& queries) {
  const int64_t Tq = queries.rows(T_);
  const OpScope scope(OpClass::kAttention, 4.0 * double(B * H) * double(Tq * T_) * double(hd), 0);
  check_heads(H, KVH);
  check_doc_starts(doc_start, B, T_);
  QueryRanges ranges;
  const int64_t range_count = query_ranges(queries, T_, ranges);
  const int64_t group = H / KVH, ld = (H + 2 * KVH) * hd, C = H * hd;
  const T scale = T(1) / std::sqrt(T(hd));
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    T* S = scratch + omp_get_thread_num() * attention_scratch_size(T_);
    const T* row0 = qkv + b * T_ * ld;
    for (int64_t c = 0; c < range_count; ++c) {
      const QueryRange& range = ranges[size_t(c)];
      for (int64_t i0 = range.begin; i0 < range.end; i0 += kQueryBlock) {
        const QueryBlock blk(b, i0, range.end, T_, kQueryBlock, doc_start);
        const int64_t out_row = range.out + i0 - range.begin;
        const T* q = row0 + i0 * ld + h * hd;
        const T* k = row0 + blk.k0 * ld + (H + h / group) * hd;
        const T* v = k + KVH * hd;
        T* row_lse = lse + bh * Tq + out_row;
        gemm<T>(ctx, false, true, blk.rows, blk.keys, hd, scale, q, ld, k, ld, T(0), S, blk.keys);
        for (int64_t r = 0; r < blk.rows; ++r) {
          const T* row = S + r * blk.keys;
          const int64_t first = blk.first(r), visible = blk.visible(r);
          T max = -std::numeric_limits<T>::infinity();
          for (int64_t j = first; j < visible; ++j) max = std::max(max, row[j]);
          T sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = first; j < visible; ++j) sum += exp_fast(row[j] - max);
          row_lse[r] = max + std::log(sum);
        }
        causal_probabilities(S, row_lse, blk);
        gemm<T>(ctx, false, false, blk.rows, hd, blk.keys, T(1), S, blk.keys, v, ld, T(0),
                out + (b * Tq + out_row) * C + h * hd, C);
      }
    }
  }
}

// The query blocks run last first: over the whole sequence without documents the last one reaches
// every key, so with beta 0 it writes all of dk and dv, and the others add into them. With
// documents a block may not reach the first keys, and with query chunks no block reaches the keys
// after the last chunk, nor are the rows outside the chunks queries: the task's slice of dqkv
// starts from zero and every block adds.
template <typename T>
void attention_backward(const Context& ctx, const T* dout, const T* qkv, const T* lse, T* dqkv,
                        T* scratch, int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd,
                        const int32_t* doc_start, const QueryChunks& queries) {
  const int64_t Tq = queries.rows(T_);
  const OpScope scope(OpClass::kAttention, 8.0 * double(B * H) * double(Tq * T_) * double(hd), 0);
  check_heads(H, KVH);
  check_doc_starts(doc_start, B, T_);
  QueryRanges ranges;
  const int64_t range_count = query_ranges(queries, T_, ranges);
  const bool accumulate = doc_start != nullptr || queries.count > 0;
  const int64_t group = H / KVH, ld = (H + 2 * KVH) * hd, C = H * hd;
  const T scale = T(1) / std::sqrt(T(hd));
#pragma omp parallel for schedule(dynamic)
  for (int64_t bg = 0; bg < B * KVH; ++bg) {
    const int64_t b = bg / KVH, g = bg % KVH;
    T* P = scratch + omp_get_thread_num() * attention_scratch_size(T_);
    T* dP = P + std::min(T_, kQueryBlock) * T_;
    const T* row0 = qkv + b * T_ * ld;
    T* dk0 = dqkv + b * T_ * ld + (H + g) * hd;
    if (accumulate) {
      for (int64_t j = 0; j < T_; ++j) {
        std::fill(dk0 + j * ld, dk0 + j * ld + hd, T(0));
        std::fill(dk0 + j * ld + KVH * hd, dk0 + j * ld + (KVH + 1) * hd, T(0));
      }
    }
    if (queries.count > 0) {
      for (int64_t j = 0; j < T_; ++j) {
        T* dq_row = dqkv + (b * T_ + j) * ld + g * group * hd;
        std::fill(dq_row, dq_row + group * hd, T(0));
      }
    }
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t c = range_count - 1; c >= 0; --c) {
        const QueryRange& range = ranges[size_t(c)];
        const int64_t last_block =
            range.begin + (range.end - range.begin - 1) / kQueryBlock * kQueryBlock;
        for (int64_t i0 = last_block; i0 >= range.begin; i0 -= kQueryBlock) {
          const QueryBlock blk(b, i0, range.end, T_, kQueryBlock, doc_start);
          const int64_t rows = blk.rows, keys = blk.keys, out_row = range.out + i0 - range.begin;
          const T* q = row0 + i0 * ld + h * hd;
          const T* k = row0 + blk.k0 * ld + (H + g) * hd;
          const T* v = k + KVH * hd;
          T* dk = dk0 + blk.k0 * ld;
          T* dv = dk + KVH * hd;
          const T* dO = dout + (b * Tq + out_row) * C + h * hd;
          T* dq = dqkv + (b * T_ + i0) * ld + h * hd;
          const T kv_beta = !accumulate && h == g * group && i0 == last_block ? T(0) : T(1);
          gemm<T>(ctx, false, true, rows, keys, hd, scale, q, ld, k, ld, T(0), P, keys);
          causal_probabilities(P, lse + (b * H + h) * Tq + out_row, blk);
          gemm<T>(ctx, false, true, rows, keys, hd, T(1), dO, C, v, ld, T(0), dP, keys);
          // dS = P * (dP - rowsum(P * dP)), written over dP.
          for (int64_t r = 0; r < rows; ++r) {
            const T* p = P + r * keys;
            T* d = dP + r * keys;
            const int64_t first = blk.first(r), visible = blk.visible(r);
            T dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t j = first; j < visible; ++j) dot += p[j] * d[j];
            std::fill(d, d + first, T(0));
#pragma omp simd
            for (int64_t j = first; j < visible; ++j) d[j] = p[j] * (d[j] - dot);
            std::fill(d + visible, d + keys, T(0));
          }
          gemm<T>(ctx, false, false, rows, hd, keys, scale, dP, keys, k, ld, T(0), dq, ld);
          gemm<T>(ctx, true, false, keys, hd, rows, scale, dP, keys, q, ld, kv_beta, dk, ld);
          gemm<T>(ctx, true, false, keys, hd, rows, T(1), P, keys, dO, C, kv_beta, dv, ld);
        }
      }
    }
  }
}

}  // namespace

void add_attention_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.attention_forward = attention_forward<float>;
  backend.ops.attention_backward = attention_backward<float>;
  f64.attention_forward = attention_forward<double>;
  f64.attention_backward = attention_backward<double>;
}

}  // namespace cpu

}  // namespace tessera::kernels
