#include <omp.h>

#include <cmath>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/device_dispatch.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

// Each task runs on one thread; its T x T scores live only in that thread's scratch while the
// task runs, and the matmuls inside run single-threaded.
int64_t attention_scratch_size(int64_t T_) { return 2 * T_ * T_; }

namespace {

// P[i, j] = exp(S[i, j] - lse[i]) for j <= i and 0 above the diagonal.
template <typename T>
void causal_probabilities(T* S, const T* lse, int64_t T_) {
  for (int64_t i = 0; i < T_; ++i) {
    T* row = S + i * T_;
    T shift = lse[i];
#pragma omp simd
    for (int64_t j = 0; j <= i; ++j) row[j] = exp_fast(row[j] - shift);
    for (int64_t j = i + 1; j < T_; ++j) row[j] = T(0);
  }
}

void check_heads(int64_t H, int64_t KVH) {
  check(KVH > 0 && H % KVH == 0, "attention: {} query heads cannot share {} key/value heads evenly",
        H, KVH);
}

}  // namespace

// Forward gives each (batch, query head) its own task. Backward groups the query heads that share
// a key/value head into one task instead, because they all add into the same dk and dv: one owner
// per dk/dv slice keeps backward race-free and its sums in a fixed order.
template <typename T>
void attention_forward(const Context& ctx, const T* qkv, T* out, T* lse, T* scratch, int64_t B,
                       int64_t T_, int64_t H, int64_t KVH, int64_t hd) {
  TESSERA_ON_DEVICE(T, ctx, attention_forward, qkv, out, lse, scratch, B, T_, H, KVH, hd);
  check_heads(H, KVH);
  const int64_t group = H / KVH, ld = (H + 2 * KVH) * hd, C = H * hd;
  const T scale = T(1) / std::sqrt(T(hd));
#pragma omp parallel for schedule(dynamic)
  for (int64_t bh = 0; bh < B * H; ++bh) {
    const int64_t b = bh / H, h = bh % H;
    T* S = scratch + omp_get_thread_num() * attention_scratch_size(T_);
    const T* row0 = qkv + b * T_ * ld;
    const T* q = row0 + h * hd;
    const T* k = row0 + (H + h / group) * hd;
    const T* v = k + KVH * hd;
    T* row_lse = lse + bh * T_;
    gemm<T>(ctx, false, true, T_, T_, hd, scale, q, ld, k, ld, T(0), S, T_);
    for (int64_t i = 0; i < T_; ++i) {
      const T* row = S + i * T_;
      T max = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j <= i; ++j) max = std::max(max, row[j]);
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j <= i; ++j) sum += exp_fast(row[j] - max);
      row_lse[i] = max + std::log(sum);
    }
    causal_probabilities(S, row_lse, T_);
    gemm<T>(ctx, false, false, T_, hd, T_, T(1), S, T_, v, ld, T(0), out + b * T_ * C + h * hd, C);
  }
}

template <typename T>
void attention_backward(const Context& ctx, const T* dout, const T* qkv, const T* lse, T* dqkv,
                        T* scratch, int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd) {
  TESSERA_ON_DEVICE(T, ctx, attention_backward, dout, qkv, lse, dqkv, scratch, B, T_, H, KVH, hd);
  check_heads(H, KVH);
  const int64_t group = H / KVH, ld = (H + 2 * KVH) * hd, C = H * hd;
  const T scale = T(1) / std::sqrt(T(hd));
#pragma omp parallel for schedule(dynamic)
  for (int64_t bg = 0; bg < B * KVH; ++bg) {
    const int64_t b = bg / KVH, g = bg % KVH;
    T* P = scratch + omp_get_thread_num() * attention_scratch_size(T_);
    T* dP = P + T_ * T_;
    const T* row0 = qkv + b * T_ * ld;
    const T* k = row0 + (H + g) * hd;
    const T* v = k + KVH * hd;
    T* dk = dqkv + b * T_ * ld + (H + g) * hd;
    T* dv = dk + KVH * hd;
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const T* q = row0 + h * hd;
      const T* dO = dout + b * T_ * C + h * hd;
      T* dq = dqkv + b * T_ * ld + h * hd;
      const T kv_beta = h == g * group ? T(0) : T(1);
      gemm<T>(ctx, false, true, T_, T_, hd, scale, q, ld, k, ld, T(0), P, T_);
      causal_probabilities(P, lse + (b * H + h) * T_, T_);
      gemm<T>(ctx, false, true, T_, T_, hd, T(1), dO, C, v, ld, T(0), dP, T_);
      // dS = P * (dP - rowsum(P * dP)), written over dP.
      for (int64_t i = 0; i < T_; ++i) {
        const T* p = P + i * T_;
        T* d = dP + i * T_;
        T dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j <= i; ++j) dot += p[j] * d[j];
#pragma omp simd
        for (int64_t j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - dot);
        for (int64_t j = i + 1; j < T_; ++j) d[j] = T(0);
      }
      gemm<T>(ctx, false, false, T_, hd, T_, scale, dP, T_, k, ld, T(0), dq, ld);
      gemm<T>(ctx, true, false, T_, hd, T_, scale, dP, T_, q, ld, kv_beta, dk, ld);
      gemm<T>(ctx, true, false, T_, hd, T_, T(1), P, T_, dO, C, kv_beta, dv, ld);
    }
  }
}

template void attention_forward<float>(const Context&, const float*, float*, float*, float*,
                                       int64_t, int64_t, int64_t, int64_t, int64_t);
template void attention_forward<double>(const Context&, const double*, double*, double*, double*,
                                        int64_t, int64_t, int64_t, int64_t, int64_t);
template void attention_backward<float>(const Context&, const float*, const float*, const float*,
                                        float*, float*, int64_t, int64_t, int64_t, int64_t,
                                        int64_t);
template void attention_backward<double>(const Context&, const double*, const double*,
                                         const double*, double*, double*, int64_t, int64_t, int64_t,
                                         int64_t, int64_t);

}  // namespace tessera::kernels
