#include "tessera/kernels/cuda/cuda_backend.h"

namespace tessera::kernels::cuda {

const Backend& backend() {
  static const Backend filled = [] {
    Backend b{.device = "CUDA", .host_memory = false};
    add_matmul_kernels(b);
    add_attention_kernels(b);
    add_cross_entropy_kernels(b);
    add_elementwise_kernels(b);
    add_embedding_kernels(b);
    add_norm_kernels(b);
    add_paged_attention_kernels(b);
    add_rope_kernels(b);
    return b;
  }();
  return filled;
}

}  // namespace tessera::kernels::cuda
