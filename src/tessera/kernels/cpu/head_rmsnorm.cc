#include <cmath>
#include <cstring>

#include "tessera/kernels/cpu/column_sums.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

template <typename T>
void head_rmsnorm_forward(const Context&, T* qkv, const T* q_gamma, const T* k_gamma, T* x, T* rstd,
                          int64_t N, int64_t H, int64_t KVH, int64_t hd, T eps) {
  const int64_t heads = H + KVH, width = (H + 2 * KVH) * hd;
  const OpScope scope(OpClass::kNormsActivations, 0,
                      (x != nullptr ? 3.0 : 2.0) * double(sizeof(T)) * double(N * heads * hd));
#pragma omp parallel for schedule(static) if (N > 1)
  for (int64_t n = 0; n < N; ++n) {
    T* row = qkv + n * width;
    if (x != nullptr) std::memcpy(x + n * heads * hd, row, sizeof(T) * size_t(heads * hd));
    for (int64_t h = 0; h < heads; ++h) {
      T* v = row + h * hd;
      const T* gamma = h < H ? q_gamma : k_gamma;
      T sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
      for (int64_t c = 0; c < hd; ++c) sum_sq += v[c] * v[c];
      const T rs = T(1) / std::sqrt(sum_sq / T(hd) + eps);
#pragma omp simd
      for (int64_t c = 0; c < hd; ++c) v[c] = v[c] * rs * gamma[c];
      if (rstd != nullptr) rstd[n * heads + h] = rs;
    }
  }
}

// Per head, rmsnorm_backward's formula: dx = rstd * (dy * gamma - xhat * mean(dy * gamma * xhat)).
template <typename T>
void head_rmsnorm_backward(const Context&, T* dqkv, const T* x, const T* q_gamma, const T* k_gamma,
                           const T* rstd, T* dq_gamma, T* dk_gamma, int64_t N, int64_t H,
                           int64_t KVH, int64_t hd) {
  const int64_t heads = H + KVH, width = (H + 2 * KVH) * hd;
  const OpScope scope(OpClass::kNormsActivations, 0,
                      4.0 * double(sizeof(T)) * double(N * heads * hd));
  // The gains' gradients first (unless frozen), from the gradient of the normed values, before
  // it is replaced.
  if (dq_gamma != nullptr)
    for_column_blocks(hd, [&](int64_t c0, int64_t c1) {
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t h = 0; h < heads; ++h) {
          const T* dy = dqkv + n * width + h * hd;
          const T* xh = x + (n * heads + h) * hd;
          const T rs = rstd[n * heads + h];
          T* dgamma = h < H ? dq_gamma : dk_gamma;
          for (int64_t c = c0; c < c1; ++c) dgamma[c] += dy[c] * xh[c] * rs;
        }
      }
    });
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t h = 0; h < heads; ++h) {
      T* dy = dqkv + n * width + h * hd;
      const T* xh = x + (n * heads + h) * hd;
      const T* gamma = h < H ? q_gamma : k_gamma;
      const T rs = rstd[n * heads + h];
      T mean_dxhat_xhat = 0;
#pragma omp simd reduction(+ : mean_dxhat_xhat)
      for (int64_t c = 0; c < hd; ++c) mean_dxhat_xhat += dy[c] * gamma[c] * xh[c] * rs;
      mean_dxhat_xhat /= T(hd);
#pragma omp simd
      for (int64_t c = 0; c < hd; ++c) {
        dy[c] = rs * (dy[c] * gamma[c] - xh[c] * rs * mean_dxhat_xhat);
      }
    }
  }
}

}  // namespace

void add_head_rmsnorm_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.head_rmsnorm_forward = head_rmsnorm_forward<float>;
  backend.ops.head_rmsnorm_backward = head_rmsnorm_backward<float>;
  f64.head_rmsnorm_forward = head_rmsnorm_forward<double>;
  f64.head_rmsnorm_backward = head_rmsnorm_backward<double>;
}

}  // namespace tessera::kernels::cpu
