// The CPU backend: each file of this folder adds the kernels it defines to the CPU's tables
// (kernels/backend.h), ops.h's in float and in double. The CPU implements every op: it is the
// reference the other backends are checked against.
#pragma once

#include "tessera/kernels/backend.h"

namespace tessera::kernels::cpu {

void add_gemm_kernels(Backend& backend, OpKernels<double>& f64);
void add_linear_kernels(Backend& backend, OpKernels<double>& f64);
void add_layernorm_kernels(Backend& backend, OpKernels<double>& f64);
void add_rmsnorm_kernels(Backend& backend, OpKernels<double>& f64);
void add_head_rmsnorm_kernels(Backend& backend, OpKernels<double>& f64);
void add_elementwise_kernels(Backend& backend, OpKernels<double>& f64);
void add_swiglu_kernels(Backend& backend, OpKernels<double>& f64);
void add_embedding_kernels(Backend& backend, OpKernels<double>& f64);
void add_vocab_shard_kernels(Backend& backend, OpKernels<double>& f64);
void add_rope_kernels(Backend& backend, OpKernels<double>& f64);
void add_attention_kernels(Backend& backend, OpKernels<double>& f64);
void add_cross_entropy_kernels(Backend& backend, OpKernels<double>& f64);

void add_cast_kernels(Backend& backend);
void add_all_finite_kernels(Backend& backend);
void add_low_precision_adamw_kernels(Backend& backend);
void add_low_precision_gemm_kernels(Backend& backend);
void add_low_precision_linear_kernels(Backend& backend);
void add_paged_attention_kernels(Backend& backend);
void add_int8_linear_kernels(Backend& backend);
void add_q4_linear_kernels(Backend& backend);
void add_q4k_linear_kernels(Backend& backend);

}  // namespace tessera::kernels::cpu
