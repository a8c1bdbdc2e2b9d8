// What a CUDA context points at (Context::cuda): made once when the context opens and released
// with it, so no kernel allocates. Reductions keep their per-block partial results in `scratch`,
// and kernels that return a value to the host copy it through the pinned `staging` buffer.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace tessera::kernels::cuda {

class GemmPlans;  // cuBLASLt matmul plans per shape (kernels/cuda/gemm_plans.h)

struct Resources {
  int ordinal = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;  // device memory for cuBLASLt (Context::workspace)
  size_t workspace_bytes = 0;
  void* scratch = nullptr;  // device memory
  size_t scratch_bytes = 0;
  void* staging = nullptr;  // pinned host memory
  size_t staging_bytes = 0;
  std::unique_ptr<GemmPlans> plans;
  // Host words a launcher packs before one copy to the device (paged attention's chunks and
  // block tables): it keeps its largest size, so a serving loop stops allocating.
  std::vector<int64_t> host_words;

  ~Resources();
};

}  // namespace tessera::kernels::cuda
