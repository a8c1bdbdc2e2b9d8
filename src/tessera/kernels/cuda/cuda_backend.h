// The CUDA backend: each file of this folder adds the kernels it defines to the CUDA table
// (kernels/backend.h), float only. An op no file adds stays null there, and a call to it on a
// CUDA context is refused by name. Pointers are device memory, except where the CPU contract hands
// a kernel host descriptions (paged_attention_forward's chunks and their block tables), which it
// copies to the device itself.
#pragma once

#include "tessera/kernels/backend.h"

namespace tessera::kernels::cuda {

void add_matmul_kernels(Backend& backend);
void add_attention_kernels(Backend& backend);
void add_cross_entropy_kernels(Backend& backend);
void add_elementwise_kernels(Backend& backend);
void add_embedding_kernels(Backend& backend);
void add_norm_kernels(Backend& backend);
void add_paged_attention_kernels(Backend& backend);
void add_rope_kernels(Backend& backend);

}  // namespace tessera::kernels::cuda
