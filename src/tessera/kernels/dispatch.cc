// The definitions of the public ops (ops.h, low_precision.h, paged_attention.h, int8_linear.h,
// q4_linear.h): each takes its kernel from the backend of its context's device (backend.h) and
// calls it, or refuses the call, naming the op and the device, where that backend has none.
#include <string_view>
#include <type_traits>

#include "tessera/core/error.h"
#include "tessera/kernels/backend.h"

namespace tessera::kernels {

namespace {

[[noreturn]] void refuse(const Context& ctx, std::string_view op, std::string_view why) {
  fail("kernel {} cannot run on a {} device: {}", op, ctx.on_cuda() ? "CUDA" : "CPU", why);
}

const Backend& backend_for(const Context& ctx, std::string_view op) {
  const Backend* backend = backend_of(ctx.device.kind);
  if (backend == nullptr) refuse(ctx, op, "this build has no CUDA backend");
  return *backend;
}

template <typename T>
const OpKernels<T>& op_kernels_for(const Context& ctx, std::string_view op) {
  if constexpr (std::is_same_v<T, float>) {
    return backend_for(ctx, op).ops;
  } else {
    const OpKernels<T>* kernels = double_kernels_of(ctx.device.kind);
    if (kernels == nullptr) refuse(ctx, op, "the CUDA backend's kernels are float");
    return *kernels;
  }
}

template <typename Kernel>
Kernel implemented(const Context& ctx, Kernel kernel, std::string_view op) {
  if (kernel == nullptr) {
    refuse(ctx, op,
           fmt::format("the {} backend does not implement it", backend_for(ctx, op).device));
  }
  return kernel;
}

template <typename T, typename Kernel>
Kernel kernel_for(const Context& ctx, Kernel OpKernels<T>::*entry, std::string_view op) {
  return implemented(ctx, op_kernels_for<T>(ctx, op).*entry, op);
}

template <typename Kernel>
Kernel kernel_for(const Context& ctx, Kernel Backend::*entry, std::string_view op) {
  return implemented(ctx, backend_for(ctx, op).*entry, op);
}

}  // namespace

template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  kernel_for(ctx, &OpKernels<T>::gemm, "gemm")(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B,
                                               ldb, beta, C, ldc);
}

template <typename T>
void linear_forward(const Context& ctx, const T* x, const T* w, const T* b, T* y, int64_t M,
                    int64_t in, int64_t out) {
  kernel_for(ctx, &OpKernels<T>::linear_forward, "linear_forward")(ctx, x, w, b, y, M, in, out);
}

template <typename T>
void linear_backward(const Context& ctx, const T* dy, const T* x, const T* w, T* dx, T* dw, T* db,
                     int64_t M, int64_t in, int64_t out) {
  kernel_for(ctx, &OpKernels<T>::linear_backward, "linear_backward")(ctx, dy, x, w, dx, dw, db, M,
                                                                     in, out);
}

template <typename T>
void layernorm_forward(const Context& ctx, const T* x, const T* gamma, const T* beta, T* y, T* mean,
                       T* rstd, int64_t M, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::layernorm_forward, "layernorm_forward")(ctx, x, gamma, beta, y,
                                                                         mean, rstd, M, C);
}

template <typename T>
void layernorm_backward(const Context& ctx, const T* dy, const T* x, const T* gamma, const T* mean,
                        const T* rstd, T* dx, T* dgamma, T* dbeta, int64_t M, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::layernorm_backward, "layernorm_backward")(
      ctx, dy, x, gamma, mean, rstd, dx, dgamma, dbeta, M, C);
}

template <typename T>
void rmsnorm_forward(const Context& ctx, const T* x, const T* gamma, T* y, T* rstd, int64_t M,
                     int64_t C, T eps) {
  kernel_for(ctx, &OpKernels<T>::rmsnorm_forward, "rmsnorm_forward")(ctx, x, gamma, y, rstd, M, C,
                                                                     eps);
}

template <typename T>
void rmsnorm_backward(const Context& ctx, const T* dy, const T* x, const T* gamma, const T* rstd,
                      T* dx, T* dgamma, int64_t M, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::rmsnorm_backward, "rmsnorm_backward")(ctx, dy, x, gamma, rstd, dx,
                                                                       dgamma, M, C);
}

template <typename T>
void gelu_forward(const Context& ctx, const T* x, T* y, int64_t n) {
  kernel_for(ctx, &OpKernels<T>::gelu_forward, "gelu_forward")(ctx, x, y, n);
}

template <typename T>
void gelu_backward(const Context& ctx, const T* dy, const T* x, T* dx, int64_t n) {
  kernel_for(ctx, &OpKernels<T>::gelu_backward, "gelu_backward")(ctx, dy, x, dx, n);
}

template <typename T>
void swiglu_forward(const Context& ctx, const T* gate_up, T* out, int64_t M, int64_t F) {
  kernel_for(ctx, &OpKernels<T>::swiglu_forward, "swiglu_forward")(ctx, gate_up, out, M, F);
}

template <typename T>
void swiglu_backward(const Context& ctx, const T* dout, const T* gate_up, T* dgate_up, int64_t M,
                     int64_t F) {
  kernel_for(ctx, &OpKernels<T>::swiglu_backward, "swiglu_backward")(ctx, dout, gate_up, dgate_up,
                                                                     M, F);
}

template <typename T>
void add(const Context& ctx, const T* a, const T* b, T* out, int64_t n) {
  kernel_for(ctx, &OpKernels<T>::add, "add")(ctx, a, b, out, n);
}

template <typename T>
void embedding_forward(const Context& ctx, const int32_t* tokens, const T* wte, const T* wpe, T* x,
                       int64_t B, int64_t T_, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::embedding_forward, "embedding_forward")(ctx, tokens, wte, wpe, x,
                                                                         B, T_, C);
}

template <typename T>
void embedding_backward(const Context& ctx, const T* dx, const int32_t* tokens, T* dwte, T* dwpe,
                        int64_t B, int64_t T_, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::embedding_backward, "embedding_backward")(ctx, dx, tokens, dwte,
                                                                           dwpe, B, T_, C);
}

template <typename T>
void vocab_shard_embedding_forward(const Context& ctx, const int32_t* tokens, const T* wte,
                                   int64_t first, int64_t count, T* x, int64_t N, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::vocab_shard_embedding_forward, "vocab_shard_embedding_forward")(
      ctx, tokens, wte, first, count, x, N, C);
}

template <typename T>
void vocab_shard_embedding_backward(const Context& ctx, const T* dx, const int32_t* tokens, T* dwte,
                                    int64_t first, int64_t count, int64_t N, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::vocab_shard_embedding_backward, "vocab_shard_embedding_backward")(
      ctx, dx, tokens, dwte, first, count, N, C);
}

template <typename T>
void position_embedding_forward(const Context& ctx, const T* wpe, T* x, int64_t first_row,
                                int64_t rows, int64_t T_, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::position_embedding_forward, "position_embedding_forward")(
      ctx, wpe, x, first_row, rows, T_, C);
}

template <typename T>
void position_embedding_backward(const Context& ctx, const T* dx, T* dwpe, int64_t first_row,
                                 int64_t rows, int64_t T_, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::position_embedding_backward, "position_embedding_backward")(
      ctx, dx, dwpe, first_row, rows, T_, C);
}

template <typename T>
void add_bias(const Context& ctx, T* y, const T* b, int64_t M, int64_t C) {
  kernel_for(ctx, &OpKernels<T>::add_bias, "add_bias")(ctx, y, b, M, C);
}

template <typename T>
void rope_forward(const Context& ctx, T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                  int64_t hd, int64_t pos0, const Rope& rope) {
  kernel_for(ctx, &OpKernels<T>::rope_forward, "rope_forward")(ctx, qkv, B, T_, H, KVH, hd, pos0,
                                                               rope);
}

template <typename T>
void rope_backward(const Context& ctx, T* dqkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                   int64_t hd, int64_t pos0, const Rope& rope) {
  kernel_for(ctx, &OpKernels<T>::rope_backward, "rope_backward")(ctx, dqkv, B, T_, H, KVH, hd, pos0,
                                                                 rope);
}

template <typename T>
void head_rmsnorm_forward(const Context& ctx, T* qkv, const T* q_gamma, const T* k_gamma, T* x,
                          T* rstd, int64_t N, int64_t H, int64_t KVH, int64_t hd, T eps) {
  kernel_for(ctx, &OpKernels<T>::head_rmsnorm_forward, "head_rmsnorm_forward")(
      ctx, qkv, q_gamma, k_gamma, x, rstd, N, H, KVH, hd, eps);
}

template <typename T>
void head_rmsnorm_backward(const Context& ctx, T* dqkv, const T* x, const T* q_gamma,
                           const T* k_gamma, const T* rstd, T* dq_gamma, T* dk_gamma, int64_t N,
                           int64_t H, int64_t KVH, int64_t hd) {
  kernel_for(ctx, &OpKernels<T>::head_rmsnorm_backward, "head_rmsnorm_backward")(
      ctx, dqkv, x, q_gamma, k_gamma, rstd, dq_gamma, dk_gamma, N, H, KVH, hd);
}

template <typename T>
void attention_forward(const Context& ctx, const T* qkv, T* out, T* lse, T* scratch, int64_t B,
                       int64_t T_, int64_t H, int64_t KVH, int64_t hd, const int32_t* doc_start,
                       const QueryChunks& queries) {
  kernel_for(ctx, &OpKernels<T>::attention_forward, "attention_forward")(
      ctx, qkv, out, lse, scratch, B, T_, H, KVH, hd, doc_start, queries);
}

template <typename T>
void attention_backward(const Context& ctx, const T* dout, const T* qkv, const T* lse, T* dqkv,
                        T* scratch, int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd,
                        const int32_t* doc_start, const QueryChunks& queries) {
  kernel_for(ctx, &OpKernels<T>::attention_backward, "attention_backward")(
      ctx, dout, qkv, lse, dqkv, scratch, B, T_, H, KVH, hd, doc_start, queries);
}

template <typename T>
void softmax_cross_entropy(const Context& ctx, T* logits, const int32_t* targets, T* losses,
                           int64_t M, int64_t V, T grad_scale) {
  kernel_for(ctx, &OpKernels<T>::softmax_cross_entropy, "softmax_cross_entropy")(
      ctx, logits, targets, losses, M, V, grad_scale);
}

template <typename T>
void vocab_shard_row_max(const Context& ctx, const T* logits, int64_t M, int64_t V, int64_t ld,
                         T* max) {
  kernel_for(ctx, &OpKernels<T>::vocab_shard_row_max, "vocab_shard_row_max")(ctx, logits, M, V, ld,
                                                                             max);
}

template <typename T>
void vocab_shard_exp_sums(const Context& ctx, T* logits, const T* max, const int32_t* targets,
                          int64_t first, int64_t M, int64_t V, int64_t ld, T* sums,
                          T* target_logits, bool keep_exponentials) {
  kernel_for(ctx, &OpKernels<T>::vocab_shard_exp_sums, "vocab_shard_exp_sums")(
      ctx, logits, max, targets, first, M, V, ld, sums, target_logits, keep_exponentials);
}

template <typename T>
void vocab_shard_softmax_grad(const Context& ctx, T* exponentials, const int32_t* targets,
                              int64_t first, const T* sums, int64_t M, int64_t V, int64_t ld,
                              T grad_scale) {
  kernel_for(ctx, &OpKernels<T>::vocab_shard_softmax_grad, "vocab_shard_softmax_grad")(
      ctx, exponentials, targets, first, sums, M, V, ld, grad_scale);
}

template <typename T>
double sum_squares(const Context& ctx, const T* x, int64_t n) {
  return kernel_for(ctx, &OpKernels<T>::sum_squares, "sum_squares")(ctx, x, n);
}

template <typename T>
void scale(const Context& ctx, T* x, T factor, int64_t n) {
  kernel_for(ctx, &OpKernels<T>::scale, "scale")(ctx, x, factor, n);
}

template <typename T>
void adamw_update(const Context& ctx, T* param, const T* grad, T* m, T* v, int64_t n,
                  const AdamWParams& p) {
  kernel_for(ctx, &OpKernels<T>::adamw_update, "adamw_update")(ctx, param, grad, m, v, n, p);
}

#define TESSERA_INSTANTIATE(T)                                                                     \
  template void gemm<T>(const Context&, bool, bool, int64_t, int64_t, int64_t, T, const T*,        \
                        int64_t, const T*, int64_t, T, T*, int64_t);                               \
  template void linear_forward<T>(const Context&, const T*, const T*, const T*, T*, int64_t,       \
                                  int64_t, int64_t);                                               \
  template void linear_backward<T>(const Context&, const T*, const T*, const T*, T*, T*, T*,       \
                                   int64_t, int64_t, int64_t);                                     \
  template void layernorm_forward<T>(const Context&, const T*, const T*, const T*, T*, T*, T*,     \
                                     int64_t, int64_t);                                            \
  template void layernorm_backward<T>(const Context&, const T*, const T*, const T*, const T*,      \
                                      const T*, T*, T*, T*, int64_t, int64_t);                     \
  template void rmsnorm_forward<T>(const Context&, const T*, const T*, T*, T*, int64_t, int64_t,   \
                                   T);                                                             \
  template void rmsnorm_backward<T>(const Context&, const T*, const T*, const T*, const T*, T*,    \
                                    T*, int64_t, int64_t);                                         \
  template void gelu_forward<T>(const Context&, const T*, T*, int64_t);                            \
  template void gelu_backward<T>(const Context&, const T*, const T*, T*, int64_t);                 \
  template void swiglu_forward<T>(const Context&, const T*, T*, int64_t, int64_t);                 \
  template void swiglu_backward<T>(const Context&, const T*, const T*, T*, int64_t, int64_t);      \
  template void add<T>(const Context&, const T*, const T*, T*, int64_t);                           \
  template void embedding_forward<T>(const Context&, const int32_t*, const T*, const T*, T*,       \
                                     int64_t, int64_t, int64_t);                                   \
  template void embedding_backward<T>(const Context&, const T*, const int32_t*, T*, T*, int64_t,   \
                                      int64_t, int64_t);                                           \
  template void vocab_shard_embedding_forward<T>(const Context&, const int32_t*, const T*,         \
                                                 int64_t, int64_t, T*, int64_t, int64_t);          \
  template void vocab_shard_embedding_backward<T>(const Context&, const T*, const int32_t*, T*,    \
                                                  int64_t, int64_t, int64_t, int64_t);             \
  template void position_embedding_forward<T>(const Context&, const T*, T*, int64_t, int64_t,      \
                                              int64_t, int64_t);                                   \
  template void position_embedding_backward<T>(const Context&, const T*, T*, int64_t, int64_t,     \
                                               int64_t, int64_t);                                  \
  template void add_bias<T>(const Context&, T*, const T*, int64_t, int64_t);                       \
  template void rope_forward<T>(const Context&, T*, int64_t, int64_t, int64_t, int64_t, int64_t,   \
                                int64_t, const Rope&);                                             \
  template void rope_backward<T>(const Context&, T*, int64_t, int64_t, int64_t, int64_t, int64_t,  \
                                 int64_t, const Rope&);                                            \
  template void head_rmsnorm_forward<T>(const Context&, T*, const T*, const T*, T*, T*, int64_t,   \
                                        int64_t, int64_t, int64_t, T);                             \
  template void head_rmsnorm_backward<T>(const Context&, T*, const T*, const T*, const T*,         \
                                         const T*, T*, T*, int64_t, int64_t, int64_t, int64_t);    \
  template void attention_forward<T>(const Context&, const T*, T*, T*, T*, int64_t, int64_t,       \
                                     int64_t, int64_t, int64_t, const int32_t*,                    \
                                     const QueryChunks&);                                          \
  template void attention_backward<T>(const Context&, const T*, const T*, const T*, T*, T*,        \
                                      int64_t, int64_t, int64_t, int64_t, int64_t, const int32_t*, \
                                      const QueryChunks&);                                         \
  template void softmax_cross_entropy<T>(const Context&, T*, const int32_t*, T*, int64_t, int64_t, \
                                         T);                                                       \
  template void vocab_shard_row_max<T>(const Context&, const T*, int64_t, int64_t, int64_t, T*);   \
  template void vocab_shard_exp_sums<T>(const Context&, T*, const T*, const int32_t*, int64_t,     \
                                        int64_t, int64_t, int64_t, T*, T*, bool);                  \
  template void vocab_shard_softmax_grad<T>(const Context&, T*, const int32_t*, int64_t, const T*, \
                                            int64_t, int64_t, int64_t, T);                         \
  template double sum_squares<T>(const Context&, const T*, int64_t);                               \
  template void scale<T>(const Context&, T*, T, int64_t);                                          \
  template void adamw_update<T>(const Context&, T*, const T*, T*, T*, int64_t, const AdamWParams&);
TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(double)
#undef TESSERA_INSTANTIATE

// low_precision.h

void cast_to_low(const Context& ctx, const float* x, uint16_t* y, int64_t n, LowPrecision p) {
  kernel_for(ctx, &Backend::cast_to_low, "cast_to_low")(ctx, x, y, n, p);
}

void cast_from_low(const Context& ctx, const uint16_t* x, float* y, int64_t n, LowPrecision p) {
  kernel_for(ctx, &Backend::cast_from_low, "cast_from_low")(ctx, x, y, n, p);
}

void gemm_low(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
              float alpha, const uint16_t* A, int64_t lda, const uint16_t* B, int64_t ldb,
              float beta, float* C, int64_t ldc, LowPrecision p) {
  kernel_for(ctx, &Backend::gemm_low, "gemm_low")(ctx, trans_a, trans_b, M, N, K, alpha, A, lda, B,
                                                  ldb, beta, C, ldc, p);
}

void linear_forward_low(const Context& ctx, const uint16_t* x, const uint16_t* w, const float* b,
                        float* y, int64_t M, int64_t in, int64_t out, LowPrecision p) {
  kernel_for(ctx, &Backend::linear_forward_low, "linear_forward_low")(ctx, x, w, b, y, M, in, out,
                                                                      p);
}

void linear_backward_low(const Context& ctx, const float* dy, const uint16_t* dy_low,
                         const uint16_t* x, const uint16_t* w, float* dx, float* dw, float* db,
                         int64_t M, int64_t in, int64_t out, LowPrecision p) {
  kernel_for(ctx, &Backend::linear_backward_low, "linear_backward_low")(ctx, dy, dy_low, x, w, dx,
                                                                        dw, db, M, in, out, p);
}

void adamw_update_low(const Context& ctx, float* master, const float* grad,
                      const uint16_t* grad_bf16, float grad_scale, float* m, float* v, int64_t n,
                      const AdamWParams& hyper, uint16_t* params_low, LowPrecision p) {
  kernel_for(ctx, &Backend::adamw_update_low, "adamw_update_low")(
      ctx, master, grad, grad_bf16, grad_scale, m, v, n, hyper, params_low, p);
}

bool all_finite(const Context& ctx, const float* x, int64_t n) {
  return kernel_for(ctx, &Backend::all_finite, "all_finite")(ctx, x, n);
}

// paged_attention.h

void paged_kv_write(const Context& ctx, const float* k, const float* v, int64_t ld,
                    const PagedKv& kv, const PagedChunk& chunk) {
  kernel_for(ctx, &Backend::paged_kv_write, "paged_kv_write")(ctx, k, v, ld, kv, chunk);
}

void paged_attention_forward(const Context& ctx, const float* q, int64_t ldq, float* out,
                             int64_t ldo, const PagedKv& kv, const PagedChunk* chunks,
                             int64_t num_chunks, int64_t H, float* scratch, int64_t max_context) {
  kernel_for(ctx, &Backend::paged_attention_forward, "paged_attention_forward")(
      ctx, q, ldq, out, ldo, kv, chunks, num_chunks, H, scratch, max_context);
}

// int8_linear.h

void linear_forward_int8(const Context& ctx, const float* x, const Int8Matrix& w, const float* b,
                         float* y, int64_t M, float* scratch) {
  kernel_for(ctx, &Backend::linear_forward_int8, "linear_forward_int8")(ctx, x, w, b, y, M,
                                                                        scratch);
}

// q4_linear.h, q4k_linear.h

void linear_forward_q4(const Context& ctx, const float* x, const Q4Matrix& w, const float* b,
                       float* y, int64_t M, float* scratch) {
  kernel_for(ctx, &Backend::linear_forward_q4, "linear_forward_q4")(ctx, x, w, b, y, M, scratch);
}

void linear_forward_q4k(const Context& ctx, const float* x, const Q4KMatrix& w, const float* b,
                        float* y, int64_t M, float* scratch) {
  kernel_for(ctx, &Backend::linear_forward_q4k, "linear_forward_q4k")(ctx, x, w, b, y, M, scratch);
}

}  // namespace tessera::kernels
