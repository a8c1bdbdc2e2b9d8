#include <oneapi/dnnl/dnnl.h>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

// float goes to oneDNN's JIT GEMM (measured fastest on this CPU family, see README).
void gemm(const Context&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(N) * double(K), 0);
  dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A,
                                    lda, B, ldb, beta, C, ldc);
  check(status == dnnl_success, "oneDNN sgemm failed with status {} for M={} N={} K={}",
        static_cast<int>(status), M, N, K);
}

// double exists for finite-difference gradient checks only: simple and exact, not fast.
void gemm(const Context&, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
          const double* A, int64_t lda, const double* B, int64_t ldb, double beta, double* C,
          int64_t ldc) {
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(N) * double(K), 0);
#pragma omp parallel for if (M * N * K > (1 << 15))
  for (int64_t i = 0; i < M; ++i) {
    double* c = C + i * ldc;
    for (int64_t j = 0; j < N; ++j) c[j] = beta == 0.0 ? 0.0 : beta * c[j];
    for (int64_t k = 0; k < K; ++k) {
      double a = alpha * (trans_a ? A[k * lda + i] : A[i * lda + k]);
      for (int64_t j = 0; j < N; ++j) c[j] += a * (trans_b ? B[j * ldb + k] : B[k * ldb + j]);
    }
  }
}

}  // namespace

void add_gemm_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.gemm = gemm;
  f64.gemm = gemm;
}

}  // namespace tessera::kernels::cpu
