// The CUDA side of kernels/device.h: device discovery, contexts and memory through the CUDA
// runtime. kernels/device.cc calls these for a CUDA context in builds with the backend.
#pragma once

#include <cstddef>
#include <string>

#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"

namespace tessera::kernels::cuda {

int device_count();
std::string unavailable_reason();
CudaDeviceInfo device_info(int ordinal);

// Fills ctx's stream, workspace and resources for device `ordinal`; close releases them.
Context open(int ordinal);
void close(const Context& ctx) noexcept;

void* allocate(const Context& ctx, size_t bytes);
void release(const Context& ctx, void* p) noexcept;
enum class Copy { kToDevice, kToHost, kOnDevice };
void copy(const Context& ctx, void* to, const void* from, size_t bytes, Copy kind);
void fill_zeros(const Context& ctx, void* p, size_t bytes);
void synchronize(const Context& ctx);
void make_current(const Context& ctx);

}  // namespace tessera::kernels::cuda
