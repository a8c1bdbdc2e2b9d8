// The kernel layer: one declaration per operation, each with its forward and backward next to
// each other. Kernels see raw row-major buffers and sizes only; they never allocate, never know
// about models or parameters, and depend on nothing above core. Every kernel is instantiated for
// float (the engine) and double (finite-difference gradient checks).
//
// Conventions: activation gradients are written (=) unless a comment says they accumulate;
// parameter gradients always accumulate (+=) so that gradient accumulation is free. Reductions
// over rows are split by columns, never across threads, so results do not depend on the thread
// count except inside the BLAS matmul.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "tessera/core/targets.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/rope.h"

namespace tessera::kernels {

// C[M,N] = alpha * op(A) * op(B) + beta * C, all row-major; op transposes when the flag is set.
template <typename T>
void gemm(const Context& ctx, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha,
          const T* A, int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// y[M,out] = x[M,in] * w[out,in]^T + b[out] (b may be null). In float, fewer than 16 rows
// (decoding) skip the GEMM for a path that reads each weight once.
template <typename T>
void linear_forward(const Context& ctx, const T* x, const T* w, const T* b, T* y, int64_t M,
                    int64_t in, int64_t out);
// dx = dy * w (written); dw += dy^T * x; db += column sums of dy. Any of dx, dw and db may be
// null, and x with dw or w with dx: a schedule that takes the weight gradient later (zero-bubble)
// runs the input gradient and the weight gradient in two calls.
template <typename T>
void linear_backward(const Context& ctx, const T* dy, const T* x, const T* w, T* dx, T* dw, T* db,
                     int64_t M, int64_t in, int64_t out);

// Row-wise LayerNorm over C channels with eps 1e-5; saves mean and 1/std per row for backward.
template <typename T>
void layernorm_forward(const Context& ctx, const T* x, const T* gamma, const T* beta, T* y, T* mean,
                       T* rstd, int64_t M, int64_t C);
// dx accumulates (+=): the residual stream's gradient flows through it. dgamma and dbeta null:
// frozen gains, whose gradients are not computed.
template <typename T>
void layernorm_backward(const Context& ctx, const T* dy, const T* x, const T* gamma, const T* mean,
                        const T* rstd, T* dx, T* dgamma, T* dbeta, int64_t M, int64_t C);

// Row-wise RMSNorm over C channels, y = x * rstd * gamma with rstd = 1/sqrt(mean(x^2) + eps),
// as Llama uses; saves rstd[M] for backward.
template <typename T>
void rmsnorm_forward(const Context& ctx, const T* x, const T* gamma, T* y, T* rstd, int64_t M,
                     int64_t C, T eps);
// dx accumulates (+=) like layernorm_backward: the residual stream's gradient flows through it.
template <typename T>
void rmsnorm_backward(const Context& ctx, const T* dy, const T* x, const T* gamma, const T* rstd,
                      T* dx, T* dgamma, int64_t M, int64_t C);

// GELU with the tanh approximation, as GPT-2 uses.
template <typename T>
void gelu_forward(const Context& ctx, const T* x, T* y, int64_t n);
template <typename T>
void gelu_backward(const Context& ctx, const T* dy, const T* x, T* dx, int64_t n);

// gate_up[M, 2F] holds gate (first F columns) then up (last F columns) per row; out[M,F] =
// silu(gate) * up.
template <typename T>
void swiglu_forward(const Context& ctx, const T* gate_up, T* out, int64_t M, int64_t F);
// dgate_up is written.
template <typename T>
void swiglu_backward(const Context& ctx, const T* dout, const T* gate_up, T* dgate_up, int64_t M,
                     int64_t F);

// out = a + b (out may alias a or b).
template <typename T>
void add(const Context& ctx, const T* a, const T* b, T* out, int64_t n);

// x[b,t,:] = wte[tokens[b,t],:] + wpe[t,:]; wpe (and dwpe) may be null for models without learned
// positions. Token ids must already be checked against the vocab.
template <typename T>
void embedding_forward(const Context& ctx, const int32_t* tokens, const T* wte, const T* wpe, T* x,
                       int64_t B, int64_t T_, int64_t C);
template <typename T>
void embedding_backward(const Context& ctx, const T* dx, const int32_t* tokens, T* dwte, T* dwpe,
                        int64_t B, int64_t T_, int64_t C);

// A vocabulary split over tensor-parallel ranks: wte holds the `count` ids from `first`.
// x[i] = wte[tokens[i] - first] for the tokens this shard holds, 0 for the others, so the ranks'
// rows sum to the embedding. Backward accumulates this shard's rows of dwte.
template <typename T>
void vocab_shard_embedding_forward(const Context& ctx, const int32_t* tokens, const T* wte,
                                   int64_t first, int64_t count, T* x, int64_t N, int64_t C);
template <typename T>
void vocab_shard_embedding_backward(const Context& ctx, const T* dx, const int32_t* tokens, T* dwte,
                                    int64_t first, int64_t count, int64_t N, int64_t C);
// x[r] += wpe[(first_row + r) % T] for `rows` rows of a [B, T] batch flattened from first_row;
// backward accumulates dwpe.
template <typename T>
void position_embedding_forward(const Context& ctx, const T* wpe, T* x, int64_t first_row,
                                int64_t rows, int64_t T_, int64_t C);
template <typename T>
void position_embedding_backward(const Context& ctx, const T* dx, T* dwpe, int64_t first_row,
                                 int64_t rows, int64_t T_, int64_t C);
// y[m] += b for each of M rows of C.
template <typename T>
void add_bias(const Context& ctx, T* y, const T* b, int64_t M, int64_t C);

// Rotary position embeddings in the Hugging Face Llama "rotate_half" layout: within a head of hd
// channels, channel i < hd/2 pairs with channel i + hd/2 and turns by pos times its frequency
// (kernels/rope.h: theta^(-2i/hd), or as the rope's scaling says).
// qkv[B, T, (H + 2*KVH) * hd]: H query heads, then KVH key heads, then KVH value heads. Rotates q
// and k heads in place for positions pos0 .. pos0+T-1; v is untouched. hd is even and at most
// kRopeMaxHeadDim.
constexpr int64_t kRopeMaxHeadDim = 512;
template <typename T>
void rope_forward(const Context& ctx, T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                  int64_t hd, int64_t pos0, const Rope& rope);
// The inverse rotation, in place on dqkv (gradient of the rotated q and k becomes gradient of the
// unrotated ones).
template <typename T>
void rope_backward(const Context& ctx, T* dqkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                   int64_t hd, int64_t pos0, const Rope& rope);

// QK-norm (Qwen 3, OLMo 2): RMSNorm of each head's hd values of q and k, in place in
// qkv[N, (H + 2*KVH) * hd] (the rope layout above) before the rotation, the query heads scaled by
// q_gamma[hd] and the key heads by k_gamma[hd]; v is untouched. Saves the inputs in
// x[N, (H + KVH) * hd] and each head's 1/rms in rstd[N, H + KVH] for backward; both may be null
// where nothing is differentiated (decoding).
template <typename T>
void head_rmsnorm_forward(const Context& ctx, T* qkv, const T* q_gamma, const T* k_gamma, T* x,
                          T* rstd, int64_t N, int64_t H, int64_t KVH, int64_t hd, T eps);
// In place on dqkv: the gradient of the normed q and k becomes the gradient of their inputs; the
// gains' gradients accumulate.
template <typename T>
void head_rmsnorm_backward(const Context& ctx, T* dqkv, const T* x, const T* q_gamma,
                           const T* k_gamma, const T* rstd, T* dq_gamma, T* dk_gamma, int64_t N,
                           int64_t H, int64_t KVH, int64_t hd);

// Causal grouped-query self-attention over qkv[B, T, (H + 2*KVH) * hd] (the rope layout above)
// into out[B, T, H*hd]; query head h reads key/value head h / (H/KVH). With KVH == H this is
// GPT-2's multi-head layout, qkv = [q(C), k(C), v(C)]. Only the log-sum-exp of each score row,
// lse[B,H,T], is kept for backward, which recomputes the probabilities: no T x T matrix outlives
// a head's work. scratch: attention_scratch_size(T) elements for each of omp_get_max_threads()
// threads. With doc_start[B, T] (documents packed into one row), query t of row b sees only the
// keys from doc_start[b, t], the first position of its document, to t; doc_start must not
// decrease along a row. Null: every query sees keys 0..t.
//
// With `queries` (a sequence split over context-parallel ranks), only the query rows of its
// chunks are computed, against every key up to each of them: out, lse and dout then hold
// [B, queries.rows(), ...], chunk after chunk, and backward writes all of dqkv[B, T, ...]: the
// chunks' dq, every key's dk and dv from these queries, zeros elsewhere.
struct QueryChunks {
  static constexpr int kMaxChunks = 2;
  int64_t count = 0;                        // 0: every row
  int64_t length = 0;                       // rows in each chunk
  std::array<int64_t, kMaxChunks> start{};  // ascending, not overlapping

  int64_t rows(int64_t T_) const { return count == 0 ? T_ : count * length; }
};
int64_t attention_scratch_size(int64_t T_);
template <typename T>
void attention_forward(const Context& ctx, const T* qkv, T* out, T* lse, T* scratch, int64_t B,
                       int64_t T_, int64_t H, int64_t KVH, int64_t hd,
                       const int32_t* doc_start = nullptr, const QueryChunks& queries = {});
template <typename T>
void attention_backward(const Context& ctx, const T* dout, const T* qkv, const T* lse, T* dqkv,
                        T* scratch, int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd,
                        const int32_t* doc_start = nullptr, const QueryChunks& queries = {});

// Fused softmax + cross-entropy over logits[M,V]: losses[m] = -log softmax(logits[m])[target].
// When grad_scale is non-zero the logits are overwritten by their gradient,
// grad_scale * (softmax - onehot(target)), so the [M,V] matrix is touched only twice. A row whose
// target is kIgnoredTarget (a token not trained on) has loss 0 and a zero gradient.
template <typename T>
void softmax_cross_entropy(const Context& ctx, T* logits, const int32_t* targets, T* losses,
                           int64_t M, int64_t V, T grad_scale);

// Softmax cross-entropy over a vocabulary split over ranks: logits[M, ld] hold this shard's V
// ids from `first` (columns V..ld are padding). The ranks exchange per-row values between the
// passes: the row maxima (combine by max), then the sums of exponentials and the target logits
// (combine by sum); the loss is log(sum) + max - target logit. keep_exponentials replaces the
// logits by exp(logit - max) for the gradient pass, which writes
// grad_scale * (softmax - onehot(target)) and zeroes the padding.
template <typename T>
void vocab_shard_row_max(const Context& ctx, const T* logits, int64_t M, int64_t V, int64_t ld,
                         T* max);
template <typename T>
void vocab_shard_exp_sums(const Context& ctx, T* logits, const T* max, const int32_t* targets,
                          int64_t first, int64_t M, int64_t V, int64_t ld, T* sums,
                          T* target_logits, bool keep_exponentials);
template <typename T>
void vocab_shard_softmax_grad(const Context& ctx, T* exponentials, const int32_t* targets,
                              int64_t first, const T* sums, int64_t M, int64_t V, int64_t ld,
                              T grad_scale);

// Sum of squares of x, accumulated in double over fixed-size chunks so the result does not
// depend on the thread count.
template <typename T>
double sum_squares(const Context& ctx, const T* x, int64_t n);
template <typename T>
void scale(const Context& ctx, T* x, T factor, int64_t n);

struct AdamWParams {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;  // 1-based, for bias correction
};
// Decoupled weight decay as torch.optim.AdamW: p -= lr*wd*p, then the Adam step.
template <typename T>
void adamw_update(const Context& ctx, T* param, const T* grad, T* m, T* v, int64_t n,
                  const AdamWParams& p);

}  // namespace tessera::kernels
