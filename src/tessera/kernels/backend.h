// A backend is the table of the kernels one kind of device runs, as llama.cpp's ggml_backend_i:
// one function pointer per op of ops.h, low_precision.h, paged_attention.h, int8_linear.h and
// q4_linear.h, in float (the CPU keeps ops.h's in double too, for the gradient checks). Each
// entry's type is taken from its op's one declaration. An entry a backend leaves null is an op its
// device lacks: a call to it is refused by name, and the layers above ask the table before they
// build what would call it (model/device_support.h).
//
// kernels/cpu and kernels/cuda each fill one table and never include each other; backend.cc picks
// a device's table, and each public op calls its context's entry (dispatch.cc): one indirect call.
#pragma once

#include <string_view>

#include "tessera/kernels/context.h"
#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"
#include "tessera/kernels/paged_attention.h"
#include "tessera/kernels/q4_linear.h"
#include "tessera/kernels/q4k_linear.h"

namespace tessera::kernels {

// The ops of ops.h in T.
template <typename T>
struct OpKernels {
  decltype(&kernels::gemm<T>) gemm = nullptr;
  decltype(&kernels::linear_forward<T>) linear_forward = nullptr;
  decltype(&kernels::linear_backward<T>) linear_backward = nullptr;
  decltype(&kernels::layernorm_forward<T>) layernorm_forward = nullptr;
  decltype(&kernels::layernorm_backward<T>) layernorm_backward = nullptr;
  decltype(&kernels::rmsnorm_forward<T>) rmsnorm_forward = nullptr;
  decltype(&kernels::rmsnorm_backward<T>) rmsnorm_backward = nullptr;
  decltype(&kernels::gelu_forward<T>) gelu_forward = nullptr;
  decltype(&kernels::gelu_backward<T>) gelu_backward = nullptr;
  decltype(&kernels::swiglu_forward<T>) swiglu_forward = nullptr;
  decltype(&kernels::swiglu_backward<T>) swiglu_backward = nullptr;
  decltype(&kernels::add<T>) add = nullptr;
  decltype(&kernels::embedding_forward<T>) embedding_forward = nullptr;
  decltype(&kernels::embedding_backward<T>) embedding_backward = nullptr;
  decltype(&kernels::vocab_shard_embedding_forward<T>) vocab_shard_embedding_forward = nullptr;
  decltype(&kernels::vocab_shard_embedding_backward<T>) vocab_shard_embedding_backward = nullptr;
  decltype(&kernels::position_embedding_forward<T>) position_embedding_forward = nullptr;
  decltype(&kernels::position_embedding_backward<T>) position_embedding_backward = nullptr;
  decltype(&kernels::add_bias<T>) add_bias = nullptr;
  decltype(&kernels::rope_forward<T>) rope_forward = nullptr;
  decltype(&kernels::rope_backward<T>) rope_backward = nullptr;
  decltype(&kernels::head_rmsnorm_forward<T>) head_rmsnorm_forward = nullptr;
  decltype(&kernels::head_rmsnorm_backward<T>) head_rmsnorm_backward = nullptr;
  decltype(&kernels::attention_forward<T>) attention_forward = nullptr;
  decltype(&kernels::attention_backward<T>) attention_backward = nullptr;
  decltype(&kernels::softmax_cross_entropy<T>) softmax_cross_entropy = nullptr;
  decltype(&kernels::vocab_shard_row_max<T>) vocab_shard_row_max = nullptr;
  decltype(&kernels::vocab_shard_exp_sums<T>) vocab_shard_exp_sums = nullptr;
  decltype(&kernels::vocab_shard_softmax_grad<T>) vocab_shard_softmax_grad = nullptr;
  decltype(&kernels::sum_squares<T>) sum_squares = nullptr;
  decltype(&kernels::scale<T>) scale = nullptr;
  decltype(&kernels::adamw_update<T>) adamw_update = nullptr;
};

struct Backend {
  std::string_view device;  // as refusals name it: "CPU", "CUDA"
  // Whether the device's kernels read and write host memory, so that code working in host
  // buffers (MPI collectives, the MoE layer's routing) can hand them its data.
  bool host_memory = false;

  OpKernels<float> ops{};
  // low_precision.h
  decltype(&kernels::cast_to_low) cast_to_low = nullptr;
  decltype(&kernels::cast_from_low) cast_from_low = nullptr;
  decltype(&kernels::gemm_low) gemm_low = nullptr;
  decltype(&kernels::linear_forward_low) linear_forward_low = nullptr;
  decltype(&kernels::linear_backward_low) linear_backward_low = nullptr;
  decltype(&kernels::adamw_update_low) adamw_update_low = nullptr;
  decltype(&kernels::all_finite) all_finite = nullptr;
  // paged_attention.h
  decltype(&kernels::paged_kv_write) paged_kv_write = nullptr;
  decltype(&kernels::paged_attention_forward) paged_attention_forward = nullptr;
  // int8_linear.h
  decltype(&kernels::linear_forward_int8) linear_forward_int8 = nullptr;
  // q4_linear.h, q4k_linear.h
  decltype(&kernels::linear_forward_q4) linear_forward_q4 = nullptr;
  decltype(&kernels::linear_forward_q4k) linear_forward_q4k = nullptr;
};

// The backend of a kind of device; null for CUDA in a build without the CUDA backend.
const Backend* backend_of(DeviceKind kind);
// ops.h in double, for the finite-difference gradient checks: the CPU's alone, null elsewhere.
const OpKernels<double>* double_kernels_of(DeviceKind kind);

// The tables each backend folder fills; backend.cc alone asks for them.
namespace cpu {
const Backend& backend();
const OpKernels<double>& double_kernels();
}  // namespace cpu
namespace cuda {
const Backend& backend();  // in builds with the CUDA backend (TESSERA_CUDA)
}  // namespace cuda

}  // namespace tessera::kernels
