// Where a kernel runs. Every operation of the kernel layer takes a Context first: the device that
// holds its operands, the stream that orders its work there, and the workspace it may use. The
// CPU runs a kernel on the calling thread's OpenMP team; a CUDA device queues it on the context's
// stream and returns, so the host must synchronise before it reads a result (the kernels that
// return a value to the host do so themselves).
#pragma once

#include <cstddef>

#include "tessera/core/enum_names.h"

namespace tessera::kernels {

enum class DeviceKind { kCpu, kCuda };
inline constexpr EnumName<DeviceKind> kDeviceKindNames[] = {{DeviceKind::kCpu, "cpu"},
                                                            {DeviceKind::kCuda, "cuda"}};
constexpr const auto& enum_names(DeviceKind) { return kDeviceKindNames; }

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;  // which CUDA device
};

// Device memory a kernel may use during one call (cuBLASLt's matmul workspace); nothing in it
// outlives the call.
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

namespace cuda {
struct Resources;  // a CUDA device's library handles and plan caches (kernels/cuda/device.h)
}

struct Context {
  Device device;
  void* stream = nullptr;  // cudaStream_t on a CUDA device; unused on the CPU
  Workspace workspace;
  cuda::Resources* cuda = nullptr;

  bool on_cuda() const { return device.kind == DeviceKind::kCuda; }
};

// The CPU, with no workspace: what host code and the tests of CPU kernels pass.
inline constexpr Context kCpuContext{};

}  // namespace tessera::kernels
