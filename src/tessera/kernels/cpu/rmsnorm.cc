#include <cmath>

#include "tessera/kernels/cpu/column_sums.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

template <typename T>
void rmsnorm_forward(const Context&, const T* x, const T* gamma, T* y, T* rstd, int64_t M,
                     int64_t C, T eps) {
  const OpScope scope(OpClass::kNormsActivations, 0, 2.0 * double(sizeof(T)) * double(M * C));
  // One row (a decoding step) is not worth waking the thread team.
#pragma omp parallel for schedule(static) if (M > 1)
  for (int64_t m = 0; m < M; ++m) {
    const T* xr = x + m * C;
    T sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t c = 0; c < C; ++c) sum_sq += xr[c] * xr[c];
    T rs = T(1) / std::sqrt(sum_sq / C + eps);
    T* yr = y + m * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] * rs * gamma[c];
    rstd[m] = rs;
  }
}

// With xhat = x * rstd, dx = rstd * (dy * gamma - xhat * mean(dy * gamma * xhat)): layernorm's
// formula without the mean terms.
template <typename T>
void rmsnorm_backward(const Context&, const T* dy, const T* x, const T* gamma, const T* rstd, T* dx,
                      T* dgamma, int64_t M, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0, 4.0 * double(sizeof(T)) * double(M * C));
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const T* dyr = dy + m * C;
    const T* xr = x + m * C;
    T rs = rstd[m];
    T mean_dxhat_xhat = 0;
#pragma omp simd reduction(+ : mean_dxhat_xhat)
    for (int64_t c = 0; c < C; ++c) mean_dxhat_xhat += dyr[c] * gamma[c] * xr[c] * rs;
    mean_dxhat_xhat /= C;
    T* dxr = dx + m * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      dxr[c] += rs * (dyr[c] * gamma[c] - xr[c] * rs * mean_dxhat_xhat);
    }
  }
  if (dgamma == nullptr) return;  // a frozen gain
  for_column_blocks(C, [&](int64_t c0, int64_t c1) {
    for (int64_t m = 0; m < M; ++m) {
      const T* dyr = dy + m * C;
      const T* xr = x + m * C;
      T rs = rstd[m];
      for (int64_t c = c0; c < c1; ++c) dgamma[c] += dyr[c] * xr[c] * rs;
    }
  });
}

}  // namespace

void add_rmsnorm_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.rmsnorm_forward = rmsnorm_forward<float>;
  backend.ops.rmsnorm_backward = rmsnorm_backward<float>;
  f64.rmsnorm_forward = rmsnorm_forward<double>;
  f64.rmsnorm_backward = rmsnorm_backward<double>;
}

}  // namespace tessera::kernels::cpu
