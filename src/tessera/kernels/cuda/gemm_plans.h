// cuBLASLt matmul plans, one per shape, operand types and epilogue: the descriptors and the
// algorithm the heuristic chose are made on a shape's first call and reused by every later one,
// so a step's matmuls make no descriptors.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace tessera::kernels::cuda {

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  cudaDataType_t operands = CUDA_R_32F;  // A and B; C is always f32
  bool bias = false;                     // the epilogue adds a bias per output column
  bool accumulate = false;               // beta != 0
  int alignment = 16;                    // bytes that every operand's address is a multiple of

  auto key() const {
    return std::tie(trans_a, trans_b, M, N, K, lda, ldb, ldc, operands, bias, accumulate,
                    alignment);
  }
  bool operator<(const GemmShape& o) const { return key() < o.key(); }
};

struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  // cuBLASLt's operands: the first is the row-major B, the second the row-major A (gemm.cc).
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class GemmPlans {
 public:
  GemmPlans() = default;
  ~GemmPlans();
  GemmPlans(const GemmPlans&) = delete;
  GemmPlans& operator=(const GemmPlans&) = delete;

  // The plan of `shape`, made on first use with `workspace_bytes` of workspace allowed.
  const GemmPlan& get(cublasLtHandle_t lt, const GemmShape& shape, size_t workspace_bytes);
  size_t size() const { return plans_.size(); }

 private:
  std::map<GemmShape, GemmPlan> plans_;
};

}  // namespace tessera::kernels::cuda
