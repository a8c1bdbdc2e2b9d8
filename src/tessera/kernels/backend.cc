#include "tessera/kernels/backend.h"

namespace tessera::kernels {

const Backend* backend_of(DeviceKind kind) {
  if (kind == DeviceKind::kCpu) return &cpu::backend();
#if TESSERA_CUDA
  return &cuda::backend();
#else
  return nullptr;
#endif
}

const OpKernels<double>* double_kernels_of(DeviceKind kind) {
  return kind == DeviceKind::kCpu ? &cpu::double_kernels() : nullptr;
}

}  // namespace tessera::kernels
