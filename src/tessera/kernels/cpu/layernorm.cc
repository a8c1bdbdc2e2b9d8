#include <cmath>

#include "tessera/kernels/cpu/column_sums.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

constexpr double kLayerNormEps = 1e-5;

template <typename T>
void layernorm_forward(const Context&, const T* x, const T* gamma, const T* beta, T* y, T* mean,
                       T* rstd, int64_t M, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 2.0 * double(sizeof(T)) * double(M * C));
  // One row (a decoding step) is not worth waking the thread team.
#pragma omp parallel for schedule(static) if (M > 1)
  for (int64_t m = 0; m < M; ++m) {
    const T* xr = x + m * C;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < C; ++c) sum += xr[c];
    T mu = sum / C;
    T var = 0;
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) var += (xr[c] - mu) * (xr[c] - mu);
    T rs = T(1) / std::sqrt(var / C + T(kLayerNormEps));
    T* yr = y + m * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
    mean[m] = mu;
    rstd[m] = rs;
  }
}

template <typename T>
void layernorm_backward(const Context&, const T* dy, const T* x, const T* gamma, const T* mean,
                        const T* rstd, T* dx, T* dgamma, T* dbeta, int64_t M, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 4.0 * double(sizeof(T)) * double(M * C));
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const T* dyr = dy + m * C;
    const T* xr = x + m * C;
    T mu = mean[m], rs = rstd[m];
    T mean_dxhat = 0, mean_dxhat_xhat = 0;
#pragma omp simd reduction(+ : mean_dxhat, mean_dxhat_xhat)
    for (int64_t c = 0; c < C; ++c) {
      T dxhat = dyr[c] * gamma[c];
      mean_dxhat += dxhat;
      mean_dxhat_xhat += dxhat * (xr[c] - mu) * rs;
    }
    mean_dxhat /= C;
    mean_dxhat_xhat /= C;
    T* dxr = dx + m * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      T xhat = (xr[c] - mu) * rs;
      dxr[c] += rs * (dyr[c] * gamma[c] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
  if (dgamma == nullptr) return;  // frozen gains
  for_column_blocks(C, [&](int64_t c0, int64_t c1) {
    for (int64_t m = 0; m < M; ++m) {
      const T* dyr = dy + m * C;
      const T* xr = x + m * C;
      T mu = mean[m], rs = rstd[m];
      for (int64_t c = c0; c < c1; ++c) {
        dgamma[c] += dyr[c] * (xr[c] - mu) * rs;
        dbeta[c] += dyr[c];
      }
    }
  });
}

}  // namespace

void add_layernorm_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.layernorm_forward = layernorm_forward<float>;
  backend.ops.layernorm_backward = layernorm_backward<float>;
  f64.layernorm_forward = layernorm_forward<double>;
  f64.layernorm_backward = layernorm_backward<double>;
}

}  // namespace tessera::kernels::cpu
