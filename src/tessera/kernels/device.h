// Devices and their memory, for the layers above the kernels: which CUDA devices the machine has,
// a context on one of them (its stream, workspace and library handles), and memory on a context's
// device with the copies between it and the host. On the CPU, memory is host memory and the
// copies are memcpy, so code written against this header runs on either.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tessera/kernels/context.h"

namespace tessera::kernels {

// Whether this build has the CUDA backend (configured with TESSERA_CUDA).
bool cuda_backend_built();
// CUDA devices this process can use: 0 without the backend, a driver or a device.
int cuda_device_count();

struct CudaDeviceInfo {
  std::string name;  // "NVIDIA H200"
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
};
CudaDeviceInfo cuda_device_info(int ordinal);

// The dense bf16 peak FLOP/s of a CUDA device's tensor cores, found from its name ("NVIDIA
// H200"): what MFU divides by on a GPU, in every precision, as llm.c and Megatron-LM report it.
// Throws naming the device and the known ones where the name matches none, so MFU is never a
// ratio to a guess.
double cuda_dense_bf16_peak(std::string_view device_name);

// Why a CUDA context cannot be made here, in one line ("this build has no CUDA backend", "no CUDA
// device: ..."), or empty when cuda_device_count() > 0. Tests print it when they skip.
std::string cuda_unavailable_reason();

// A context on a device and what it points at: on CUDA a stream, the matmul workspace and the
// library handles, made once and released with the object. The CPU's needs nothing.
class DeviceContext {
 public:
  // Throws naming the device when it cannot be used (absent, or this build lacks its backend).
  explicit DeviceContext(Device device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  const Context& context() const { return context_; }

 private:
  Context context_;
};

// `bytes` of zeroed memory on ctx's device, 256-byte aligned; freed with device_free.
void* device_allocate(const Context& ctx, size_t bytes);
void device_free(const Context& ctx, void* p) noexcept;

// Copies queued on ctx's stream; copy_to_host waits for it, so the host may read `to` at once.
void copy_to_device(const Context& ctx, void* to, const void* from, size_t bytes);
void copy_to_host(const Context& ctx, void* to, const void* from, size_t bytes);
void copy_on_device(const Context& ctx, void* to, const void* from, size_t bytes);
void fill_zeros(const Context& ctx, void* p, size_t bytes);
// Waits until the work queued on ctx's stream has finished.
void synchronize(const Context& ctx);
// Makes ctx's device the calling thread's current one, as a thread must before it queues work on
// a CUDA context it did not open.
void make_current(const Context& ctx);

// An array of n elements of T on ctx's device, zeroed, freed with the object.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const Context& ctx, int64_t n)
      : ctx_(&ctx),
        n_(n),
        data_(n > 0 ? static_cast<T*>(device_allocate(ctx, sizeof(T) * size_t(n))) : nullptr) {}
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept : ctx_(o.ctx_), n_(o.n_), data_(o.data_) {
    o.data_ = nullptr;
  }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      ctx_ = o.ctx_, n_ = o.n_, data_ = o.data_;
      o.data_ = nullptr;
    }
    return *this;
  }

  T* data() const { return data_; }
  int64_t size() const { return n_; }

 private:
  void reset() {
    if (data_ != nullptr) device_free(*ctx_, data_);
    data_ = nullptr;
  }
  const Context* ctx_ = nullptr;
  int64_t n_ = 0;
  T* data_ = nullptr;
};

}  // namespace tessera::kernels
