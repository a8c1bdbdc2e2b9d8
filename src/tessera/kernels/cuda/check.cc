#include "tessera/kernels/cuda/check.h"

#include "tessera/core/error.h"

namespace tessera::kernels::cuda {

void fail_cuda(const char* what, cudaError_t status) {
  fail("CUDA: {} failed: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}

void fail_cublas(const char* what, cublasStatus_t status) {
  fail("cuBLASLt: {} failed: {} (status {})", what, cublasLtGetStatusString(status), int(status));
}

void require(bool ok, const char* message) {
  if (!ok) throw Error(message);
}

}  // namespace tessera::kernels::cuda
