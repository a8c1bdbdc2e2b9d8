// Matmuls on a CUDA device through cuBLASLt: f32 operands with f32 arithmetic (no TF32, so results
// match the CPU's sgemm to f32 rounding), bf16 or f16 operands with f32 accumulation and output,
// the bias of a linear layer added by the matmul's epilogue.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tessera/core/error.h"
#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/column_sums.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/gemm_plans.h"
#include "tessera/kernels/cuda/resources.h"

namespace tessera::kernels::cuda {

namespace {

template <typename V>
void set_attribute(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attribute,
                   const V& value) {
  check_cublas(cublasLtMatmulDescSetAttribute(op, attribute, &value, sizeof(value)),
               "cublasLtMatmulDescSetAttribute");
}

cublasLtMatrixLayout_t matrix_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld) {
  cublasLtMatrixLayout_t layout = nullptr;
  check_cublas(cublasLtMatrixLayoutCreate(&layout, type, uint64_t(rows), uint64_t(cols), ld),
               "cublasLtMatrixLayoutCreate");
  return layout;
}

// The largest power of two up to 16 that divides every address: cuBLASLt's vectorised kernels
// need 16-byte operands, and a parameter or an activation slice may start anywhere.
int alignment_of(std::initializer_list<const void*> pointers) {
  int alignment = 16;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    while (reinterpret_cast<uintptr_t>(p) % uintptr_t(alignment) != 0) alignment /= 2;
  }
  return alignment;
}

cudaDataType_t low_type(LowPrecision p) {
  return p == LowPrecision::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
}

// C[M,N] = alpha * op(A) op(B) + beta * C (+ bias[N] per row), row-major, A and B of `operands`.
void matmul(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
            float alpha, const void* A, int64_t lda, const void* B, int64_t ldb, float beta,
            float* C, int64_t ldc, cudaDataType_t operands, const float* bias) {
  check(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    check(beta == 0.0f || beta == 1.0f, "gemm: K = 0 with beta {} (only 0 or 1)", beta);
    check(bias == nullptr, "gemm: K = 0 with a bias");
    if (beta == 0.0f) {
      check_cuda(cudaMemset2DAsync(C, size_t(ldc) * sizeof(float), 0, size_t(N) * sizeof(float),
                                   size_t(M), stream_of(ctx)),
                 "cudaMemset2DAsync");
    }
    return;
  }
  GemmShape shape;
  shape.trans_a = trans_a, shape.trans_b = trans_b;
  shape.M = M, shape.N = N, shape.K = K, shape.lda = lda, shape.ldb = ldb, shape.ldc = ldc;
  shape.operands = operands;
  shape.bias = bias != nullptr;
  shape.accumulate = beta != 0.0f;
  shape.alignment = alignment_of({A, B, C, bias});
  Resources& r = *ctx.cuda;
  const GemmPlan& plan = r.plans->get(r.lt, shape, ctx.workspace.bytes);
  if (bias != nullptr) set_attribute(plan.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  // cuBLASLt is column-major: row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so
  // its first operand is B as stored and its second A.
  check_cublas(
      cublasLtMatmul(r.lt, plan.op, &alpha, B, plan.first, A, plan.second, &beta, C, plan.c, C,
                     plan.c, &plan.algo, ctx.workspace.data, ctx.workspace.bytes, stream_of(ctx)),
      "cublasLtMatmul");
}

}  // namespace

GemmPlans::~GemmPlans() {
  for (auto& [shape, plan] : plans_) {
    cublasLtMatrixLayoutDestroy(plan.first);
    cublasLtMatrixLayoutDestroy(plan.second);
    cublasLtMatrixLayoutDestroy(plan.c);
    cublasLtMatmulDescDestroy(plan.op);
  }
}

const GemmPlan& GemmPlans::get(cublasLtHandle_t lt, const GemmShape& s, size_t workspace_bytes) {
  if (auto it = plans_.find(s); it != plans_.end()) return it->second;
  GemmPlan p;
  check_cublas(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F),
               "cublasLtMatmulDescCreate");
  set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N);
  set_attribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
  if (s.bias) {
    set_attribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_attribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, CUDA_R_32F);
  }
  // Column-major views of the row-major operands as stored.
  p.first = matrix_layout(s.operands, s.trans_b ? s.K : s.N, s.trans_b ? s.N : s.K, s.ldb);
  p.second = matrix_layout(s.operands, s.trans_a ? s.M : s.K, s.trans_a ? s.K : s.M, s.lda);
  p.c = matrix_layout(CUDA_R_32F, s.N, s.M, s.ldc);

  cublasLtMatmulPreference_t preference = nullptr;
  check_cublas(cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
  const uint64_t workspace = workspace_bytes;
  const uint32_t alignment = uint32_t(s.alignment);
  cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspace, sizeof(workspace));
  for (auto attribute :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment, sizeof(alignment));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.first, p.second, p.c,
                                                               p.c, preference, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    cublasLtMatrixLayoutDestroy(p.first);
    cublasLtMatrixLayoutDestroy(p.second);
    cublasLtMatrixLayoutDestroy(p.c);
    cublasLtMatmulDescDestroy(p.op);
    fail(
        "cuBLASLt has no matmul for M={} N={} K={} (transposes {} {}, lda {} ldb {} ldc {}, "
        "{}-byte aligned): {}",
        s.M, s.N, s.K, s.trans_a, s.trans_b, s.lda, s.ldb, s.ldc, s.alignment,
        cublasLtGetStatusString(status));
  }
  p.algo = result.algo;
  return plans_.emplace(s, p).first->second;
}

namespace {

void gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
          float* C, int64_t ldc) {
  matmul(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, CUDA_R_32F, nullptr);
}

void linear_forward(const Context& ctx, const float* x, const float* w, const float* b, float* y,
                    int64_t M, int64_t in, int64_t out) {
  matmul(ctx, false, true, M, out, in, 1.0f, x, in, w, in, 0.0f, y, out, CUDA_R_32F, b);
}

void linear_backward(const Context& ctx, const float* dy, const float* x, const float* w, float* dx,
                     float* dw, float* db, int64_t M, int64_t in, int64_t out) {
  if (dx != nullptr) {
    matmul(ctx, false, false, M, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in, CUDA_R_32F, nullptr);
  }
  if (dw != nullptr) {
    matmul(ctx, true, false, out, in, M, 1.0f, dy, out, x, in, 1.0f, dw, in, CUDA_R_32F, nullptr);
  }
  if (db != nullptr) accumulate_column_sums(ctx, dy, M, out, db);
}

void gemm_low(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
              float beta, float* C, int64_t ldc, LowPrecision p) {
  matmul(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, low_type(p), nullptr);
}

void linear_forward_low(const Context& ctx, const uint16_t* x, const uint16_t* w, const float* b,
                        float* y, int64_t M, int64_t in, int64_t out, LowPrecision p) {
  matmul(ctx, false, true, M, out, in, 1.0f, x, in, w, in, 0.0f, y, out, low_type(p), b);
}

void linear_backward_low(const Context& ctx, const float* dy, const uint16_t* dy_low,
                         const uint16_t* x, const uint16_t* w, float* dx, float* dw, float* db,
                         int64_t M, int64_t in, int64_t out, LowPrecision p) {
  if (dx != nullptr) {
    matmul(ctx, false, false, M, in, out, 1.0f, dy_low, out, w, in, 0.0f, dx, in, low_type(p),
           nullptr);
  }
  if (dw != nullptr) {
    matmul(ctx, true, false, out, in, M, 1.0f, dy_low, out, x, in, 1.0f, dw, in, low_type(p),
           nullptr);
  }
  if (db != nullptr) {
    check(dy != nullptr, "linear_backward_low: the bias gradient needs the f32 dy");
    accumulate_column_sums(ctx, dy, M, out, db);
  }
}

}  // namespace

void add_matmul_kernels(Backend& backend) {
  backend.ops.gemm = gemm;
  backend.ops.linear_forward = linear_forward;
  backend.ops.linear_backward = linear_backward;
  backend.gemm_low = gemm_low;
  backend.linear_forward_low = linear_forward_low;
  backend.linear_backward_low = linear_backward_low;
}

}  // namespace tessera::kernels::cuda
