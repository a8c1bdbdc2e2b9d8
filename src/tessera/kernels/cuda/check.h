// CUDA, cuBLASLt and NCCL status codes as Errors that name the call that failed, for the CUDA
// backend's host code and kernel launchers.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "tessera/kernels/context.h"

namespace tessera::kernels::cuda {

[[noreturn]] void fail_cuda(const char* what, cudaError_t status);
[[noreturn]] void fail_cublas(const char* what, cublasStatus_t status);

inline void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail_cuda(what, status);
}
inline void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail_cublas(what, status);
}
// After a kernel launch: a bad launch configuration is reported here, errors inside the kernel
// at the next synchronising call.
inline void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

// A launcher's precondition. Kernel files cannot format messages (nvcc does not compile fmt's
// checked format strings), so the message is fixed text naming the kernel and what it needs.
void require(bool ok, const char* message);

inline cudaStream_t stream_of(const Context& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

}  // namespace tessera::kernels::cuda
