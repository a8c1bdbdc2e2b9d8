#include <cuda_runtime.h>

#include <algorithm>
#include <memory>

#include "tessera/core/error.h"
#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/cuda_device.h"
#include "tessera/kernels/cuda/gemm_plans.h"
#include "tessera/kernels/cuda/resources.h"

namespace tessera::kernels::cuda {

namespace {

// cuBLASLt's matmul workspace: NVIDIA recommends 32 MiB on Hopper for its best kernels.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Per-block partial sums of the reductions that return to the host, and paged attention's chunk
// descriptions and block tables for one decode step.
constexpr size_t kScratchBytes = size_t(16) << 20;
constexpr size_t kStagingBytes = size_t(4) << 20;

}  // namespace

Resources::~Resources() {
  plans.reset();
  if (lt != nullptr) cublasLtDestroy(lt);
  cudaFree(workspace);
  cudaFree(scratch);
  cudaFreeHost(staging);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clears the sticky "no driver" error for later calls
    return 0;
  }
  return count;
}

std::string unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("no CUDA device: {}", cudaGetErrorString(status));
  }
  return count == 0 ? "no CUDA device" : "";
}

CudaDeviceInfo device_info(int ordinal) {
  cudaDeviceProp p{};
  check_cuda(cudaGetDeviceProperties(&p, ordinal), "cudaGetDeviceProperties");
  return CudaDeviceInfo{p.name, p.major, p.minor, p.multiProcessorCount, int64_t(p.totalGlobalMem)};
}

Context open(int ordinal) {
  const int count = device_count();
  if (ordinal < 0 || ordinal >= count) {
    fail("CUDA device {} was asked for, but {}", ordinal,
         count == 0 ? unavailable_reason()
                    : fmt::format("this machine has {} (0 to {})", count, count - 1));
  }
  check_cuda(cudaSetDevice(ordinal), "cudaSetDevice");
  auto r = std::make_unique<Resources>();
  r->ordinal = ordinal;
  check_cuda(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cublas(cublasLtCreate(&r->lt), "cublasLtCreate");
  check_cuda(cudaMalloc(&r->workspace, kWorkspaceBytes), "cudaMalloc (matmul workspace)");
  r->workspace_bytes = kWorkspaceBytes;
  check_cuda(cudaMalloc(&r->scratch, kScratchBytes), "cudaMalloc (reduction scratch)");
  r->scratch_bytes = kScratchBytes;
  check_cuda(cudaMallocHost(&r->staging, kStagingBytes), "cudaMallocHost (staging)");
  r->staging_bytes = kStagingBytes;
  r->plans = std::make_unique<GemmPlans>();
  Context ctx;
  ctx.device = Device{DeviceKind::kCuda, ordinal};
  ctx.stream = r->stream;
  ctx.workspace = Workspace{r->workspace, r->workspace_bytes};
  ctx.cuda = r.release();
  return ctx;
}

void close(const Context& ctx) noexcept {
  if (ctx.cuda == nullptr) return;
  cudaStreamSynchronize(ctx.cuda->stream);
  delete ctx.cuda;
}

void* allocate(const Context& ctx, size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, std::max<size_t>(bytes, 1));
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    fail("out of memory on CUDA device {}: {} bytes asked for, {} of {} free ({})",
         ctx.device.ordinal, bytes, free, total, cudaGetErrorString(status));
  }
  check_cuda(cudaMemsetAsync(p, 0, bytes, stream_of(ctx)), "cudaMemsetAsync");
  return p;
}

void release(const Context&, void* p) noexcept { cudaFree(p); }

void copy(const Context& ctx, void* to, const void* from, size_t bytes, Copy kind) {
  if (bytes == 0) return;
  const cudaMemcpyKind how = kind == Copy::kToDevice ? cudaMemcpyHostToDevice
                             : kind == Copy::kToHost ? cudaMemcpyDeviceToHost
                                                     : cudaMemcpyDeviceToDevice;
  check_cuda(cudaMemcpyAsync(to, from, bytes, how, stream_of(ctx)), "cudaMemcpyAsync");
  if (kind == Copy::kToHost) cuda::synchronize(ctx);
}

void fill_zeros(const Context& ctx, void* p, size_t bytes) {
  if (bytes != 0) check_cuda(cudaMemsetAsync(p, 0, bytes, stream_of(ctx)), "cudaMemsetAsync");
}

void make_current(const Context& ctx) {
  check_cuda(cudaSetDevice(ctx.device.ordinal), "cudaSetDevice");
}

void synchronize(const Context& ctx) {
  check_cuda(cudaStreamSynchronize(stream_of(ctx)), "cudaStreamSynchronize");
}

}  // namespace tessera::kernels::cuda
