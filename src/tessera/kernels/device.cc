#include "tessera/kernels/device.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/huge_pages.h"
#if TESSERA_CUDA
#include "tessera/kernels/cuda/cuda_device.h"
#endif

namespace tessera::kernels {

namespace {

constexpr size_t kAlignment = 256;

#if !TESSERA_CUDA
[[noreturn]] void fail_no_backend() {
  fail(
      "a CUDA device was asked for, but this build has no CUDA backend: rebuild where nvcc is "
      "found (cmake -DTESSERA_CUDA=ON)");
}
#endif

}  // namespace

bool cuda_backend_built() { return TESSERA_CUDA != 0; }

int cuda_device_count() {
#if TESSERA_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

CudaDeviceInfo cuda_device_info(int ordinal) {
#if TESSERA_CUDA
  return cuda::device_info(ordinal);
#else
  (void)ordinal;
  fail_no_backend();
#endif
}

double cuda_dense_bf16_peak(std::string_view device_name) {
  // NVIDIA's datasheets, without 2:4 sparsity; configs/hardware.toml holds the same figures for
  // the planner (a test keeps them equal). The PCIe H100 comes before the SXM one it contains.
  static constexpr std::pair<std::string_view, double> kPeaks[] = {{"A100", 312e12},
                                                                   {"H100 PCIe", 756e12},
                                                                   {"H100", 989e12},
                                                                   {"H200", 989e12},
                                                                   {"B200", 2250e12}};
  std::string known;
  for (const auto& [chip, peak] : kPeaks) {
    if (device_name.find(chip) != std::string_view::npos) return peak;
    known += known.empty() ? std::string(chip) : ", " + std::string(chip);
  }
  fail(
      "no dense bf16 peak is known for the CUDA device '{}' (known: {}): give it as "
      "train.peak_flops",
      device_name, known);
}

std::string cuda_unavailable_reason() {
#if TESSERA_CUDA
  return cuda::unavailable_reason();
#else
  return "this build has no CUDA backend";
#endif
}

DeviceContext::DeviceContext(Device device) {
  context_.device = device;
  if (device.kind == DeviceKind::kCpu) return;
#if TESSERA_CUDA
  context_ = cuda::open(device.ordinal);
#else
  fail_no_backend();
#endif
}

DeviceContext::~DeviceContext() {
#if TESSERA_CUDA
  if (context_.on_cuda()) cuda::close(context_);
#endif
}

void* device_allocate(const Context& ctx, size_t bytes) {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::allocate(ctx, bytes);
#endif
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  void* p = allocate_large(rounded, kAlignment);
  std::memset(p, 0, rounded);
  return p;
}

void device_free(const Context& ctx, void* p) noexcept {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::release(ctx, p);
#endif
  (void)ctx;
  free_large(p);
}

void copy_to_device(const Context& ctx, void* to, const void* from, size_t bytes) {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::copy(ctx, to, from, bytes, cuda::Copy::kToDevice);
#endif
  if (bytes != 0) std::memcpy(to, from, bytes);
}

void copy_to_host(const Context& ctx, void* to, const void* from, size_t bytes) {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::copy(ctx, to, from, bytes, cuda::Copy::kToHost);
#endif
  if (bytes != 0) std::memcpy(to, from, bytes);
}

void copy_on_device(const Context& ctx, void* to, const void* from, size_t bytes) {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::copy(ctx, to, from, bytes, cuda::Copy::kOnDevice);
#endif
  if (bytes != 0 && to != from) std::memmove(to, from, bytes);
}

void fill_zeros(const Context& ctx, void* p, size_t bytes) {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::fill_zeros(ctx, p, bytes);
#endif
  if (bytes != 0) std::memset(p, 0, bytes);
}

void make_current(const Context& ctx) {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::make_current(ctx);
#endif
  (void)ctx;
}

void synchronize(const Context& ctx) {
#if TESSERA_CUDA
  if (ctx.on_cuda()) return cuda::synchronize(ctx);
#endif
  (void)ctx;
}

}  // namespace tessera::kernels
