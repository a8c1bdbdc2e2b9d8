#include "tessera/kernels/cpu/cpu_backend.h"

namespace tessera::kernels::cpu {

namespace {

struct Tables {
  Backend backend{.device = "CPU", .host_memory = true};
  OpKernels<double> f64;
};

const Tables& tables() {
  static const Tables filled = [] {
    Tables t;
    add_gemm_kernels(t.backend, t.f64);
    add_linear_kernels(t.backend, t.f64);
    add_layernorm_kernels(t.backend, t.f64);
    add_rmsnorm_kernels(t.backend, t.f64);
    add_head_rmsnorm_kernels(t.backend, t.f64);
    add_elementwise_kernels(t.backend, t.f64);
    add_swiglu_kernels(t.backend, t.f64);
    add_embedding_kernels(t.backend, t.f64);
    add_vocab_shard_kernels(t.backend, t.f64);
    add_rope_kernels(t.backend, t.f64);
    add_attention_kernels(t.backend, t.f64);
    add_cross_entropy_kernels(t.backend, t.f64);
    add_cast_kernels(t.backend);
    add_all_finite_kernels(t.backend);
    add_low_precision_adamw_kernels(t.backend);
    add_low_precision_gemm_kernels(t.backend);
    add_low_precision_linear_kernels(t.backend);
    add_paged_attention_kernels(t.backend);
    add_int8_linear_kernels(t.backend);
    add_q4_linear_kernels(t.backend);
    add_q4k_linear_kernels(t.backend);
    return t;
  }();
  return filled;
}

}  // namespace

const Backend& backend() { return tables().backend; }

const OpKernels<double>& double_kernels() { return tables().f64; }

}  // namespace tessera::kernels::cpu
