// The CUDA backend: the float kernels of ops.h, low_precision.h and paged_attention.h on a CUDA
// device, with the same names, arguments and contracts, each queued on its context's stream.
// Pointers are device memory, except where the CPU contract hands the kernel host descriptions
// (paged_attention_forward's chunks and their block tables), which it copies to the device itself.
// Only the CPU kernels include this header, to hand a call on a CUDA context here; it exists in
// builds with the CUDA backend (TESSERA_CUDA).
#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"
#include "tessera/kernels/paged_attention.h"

namespace tessera::kernels::cuda {

// ops.h
void gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
          float alpha, const float* A, int64_t lda, const float* B, int64_t ldb, float beta,
          float* C, int64_t ldc);
void linear_forward(const Context& ctx, const float* x, const float* w, const float* b, float* y,
                    int64_t M, int64_t in, int64_t out);
void linear_backward(const Context& ctx, const float* dy, const float* x, const float* w, float* dx,
                     float* dw, float* db, int64_t M, int64_t in, int64_t out);
void layernorm_forward(const Context& ctx, const float* x, const float* gamma, const float* beta,
                       float* y, float* mean, float* rstd, int64_t M, int64_t C);
void layernorm_backward(const Context& ctx, const float* dy, const float* x, const float* gamma,
                        const float* mean, const float* rstd, float* dx, float* dgamma,
                        float* dbeta, int64_t M, int64_t C);
void rmsnorm_forward(const Context& ctx, const float* x, const float* gamma, float* y, float* rstd,
                     int64_t M, int64_t C, float eps);
void rmsnorm_backward(const Context& ctx, const float* dy, const float* x, const float* gamma,
                      const float* rstd, float* dx, float* dgamma, int64_t M, int64_t C);
void gelu_forward(const Context& ctx, const float* x, float* y, int64_t n);
void gelu_backward(const Context& ctx, const float* dy, const float* x, float* dx, int64_t n);
void swiglu_forward(const Context& ctx, const float* gate_up, float* out, int64_t M, int64_t F);
void swiglu_backward(const Context& ctx, const float* dout, const float* gate_up, float* dgate_up,
                     int64_t M, int64_t F);
void add(const Context& ctx, const float* a, const float* b, float* out, int64_t n);
void embedding_forward(const Context& ctx, const int32_t* tokens, const float* wte,
                       const float* wpe, float* x, int64_t B, int64_t T_, int64_t C);
void embedding_backward(const Context& ctx, const float* dx, const int32_t* tokens, float* dwte,
                        float* dwpe, int64_t B, int64_t T_, int64_t C);
void vocab_shard_embedding_forward(const Context& ctx, const int32_t* tokens, const float* wte,
                                   int64_t first, int64_t count, float* x, int64_t N, int64_t C);
void vocab_shard_embedding_backward(const Context& ctx, const float* dx, const int32_t* tokens,
                                    float* dwte, int64_t first, int64_t count, int64_t N,
                                    int64_t C);
void position_embedding_forward(const Context& ctx, const float* wpe, float* x, int64_t first_row,
                                int64_t rows, int64_t T_, int64_t C);
void position_embedding_backward(const Context& ctx, const float* dx, float* dwpe,
                                 int64_t first_row, int64_t rows, int64_t T_, int64_t C);
void add_bias(const Context& ctx, float* y, const float* b, int64_t M, int64_t C);
void rope_forward(const Context& ctx, float* qkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                  int64_t hd, int64_t pos0, double theta);
void rope_backward(const Context& ctx, float* dqkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                   int64_t hd, int64_t pos0, double theta);
void attention_forward(const Context& ctx, const float* qkv, float* out, float* lse, float* scratch,
                       int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd);
void attention_backward(const Context& ctx, const float* dout, const float* qkv, const float* lse,
                        float* dqkv, float* scratch, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                        int64_t hd);
void softmax_cross_entropy(const Context& ctx, float* logits, const int32_t* targets, float* losses,
                           int64_t M, int64_t V, float grad_scale);
void vocab_shard_row_max(const Context& ctx, const float* logits, int64_t M, int64_t V, int64_t ld,
                         float* max);
void vocab_shard_exp_sums(const Context& ctx, float* logits, const float* max,
                          const int32_t* targets, int64_t first, int64_t M, int64_t V, int64_t ld,
                          float* sums, float* target_logits, bool keep_exponentials);
void vocab_shard_softmax_grad(const Context& ctx, float* exponentials, const int32_t* targets,
                              int64_t first, const float* sums, int64_t M, int64_t V, int64_t ld,
                              float grad_scale);
double sum_squares(const Context& ctx, const float* x, int64_t n);
void scale(const Context& ctx, float* x, float factor, int64_t n);
void adamw_update(const Context& ctx, float* param, const float* grad, float* m, float* v,
                  int64_t n, const AdamWParams& p);

// low_precision.h
void cast_to_low(const Context& ctx, const float* x, uint16_t* y, int64_t n, LowPrecision p);
void adamw_update_low(const Context& ctx, float* master, const float* grad,
                      const uint16_t* grad_bf16, float grad_scale, float* m, float* v, int64_t n,
                      const AdamWParams& hyper, uint16_t* params_low, LowPrecision p);
void cast_from_low(const Context& ctx, const uint16_t* x, float* y, int64_t n, LowPrecision p);
void gemm_low(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
              float beta, float* C, int64_t ldc, LowPrecision p);
void linear_forward_low(const Context& ctx, const uint16_t* x, const uint16_t* w, const float* b,
                        float* y, int64_t M, int64_t in, int64_t out, LowPrecision p);
void linear_backward_low(const Context& ctx, const float* dy, const uint16_t* dy_low,
                         const uint16_t* x, const uint16_t* w, float* dx, float* dw, float* db,
                         int64_t M, int64_t in, int64_t out, LowPrecision p);
bool all_finite(const Context& ctx, const float* x, int64_t n);

// paged_attention.h
void paged_kv_write(const Context& ctx, const float* k, const float* v, int64_t ld,
                    const PagedKv& kv, const PagedChunk& chunk);
void paged_attention_forward(const Context& ctx, const float* q, int64_t ldq, float* out,
                             int64_t ldo, const PagedKv& kv, const PagedChunk* chunks,
                             int64_t num_chunks, int64_t H, float* scratch, int64_t max_context);

}  // namespace tessera::kernels::cuda
