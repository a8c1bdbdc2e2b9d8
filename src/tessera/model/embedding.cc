#include "tessera/model/embedding.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

Embedding::Embedding(const kernels::Context& ctx, const ModelLayout& layout,
                     const TensorParallel& tp, Collectives* tp_group,
                     const ParallelScratch& scratch, float* position_grads)
    : ctx_(ctx),
      tokens_(layout.outer[PartId::kTokenEmbedding]),
      positions_(layout.outer[PartId::kPositionEmbedding]),
      vocab_(layout.vocab),
      C_(layout.spec.block.d_model),
      tp_(tp),
      tp_group_(tp_group),
      scratch_(scratch),
      position_grads_(position_grads) {}

void Embedding::forward(const ParamAccess& p, const int32_t* tokens, float* x, int64_t B,
                        int64_t T) const {
  const int64_t N = B * T;
  const float* wpe = positions_.weight >= 0 ? p.f32(positions_.weight) : nullptr;
  const float* wte = p.f32(tokens_.weight);
  if (!tp_.active()) {
    k::embedding_forward(ctx_, tokens, wte, wpe, x, B, T, C_);
    return;
  }
  float* rows = tp_.sequence_parallel() ? scratch_.partial : x;
  k::vocab_shard_embedding_forward(ctx_, tokens, wte, vocab_.begin, vocab_.real(), rows, N, C_);
  tp_.complete(rows, x, N);
  if (wpe != nullptr)
    k::position_embedding_forward(ctx_, wpe, x, tp_.first_row(N), tp_.rows(N), T, C_);
}

void Embedding::forward_chunks(const ParamAccess& p, const int32_t* tokens,
                               std::span<const k::PagedChunk> chunks, float* x, int64_t N) const {
  const float* wpe = positions_.weight >= 0 ? p.f32(positions_.weight) : nullptr;
  const float* wte = p.f32(tokens_.weight);
  if (!tp_.active()) {
    for (const k::PagedChunk& c : chunks) {
      k::embedding_forward(ctx_, tokens + c.row, wte, wpe != nullptr ? wpe + c.start * C_ : nullptr,
                           x + c.row * C_, 1, c.n, C_);
    }
    return;
  }
  check(!tp_.sequence_parallel(),
        "decoding runs every row on every tensor-parallel rank, without "
        "sequence parallelism");
  k::vocab_shard_embedding_forward(ctx_, tokens, wte, vocab_.begin, vocab_.real(), x, N, C_);
  tp_group_->all_reduce(x, N * C_);
  if (wpe == nullptr) return;
  for (const k::PagedChunk& c : chunks) {
    k::position_embedding_forward(ctx_, wpe + c.start * C_, x + c.row * C_, 0, c.n, c.n, C_);
  }
}

void Embedding::backward(const ParamAccess& p, const float* dx, const int32_t* tokens, int64_t B,
                         int64_t T) const {
  const int64_t N = B * T;
  float* dwpe = positions_.weight >= 0 ? p.grad(positions_.weight) : nullptr;
  float* dwte = p.grad(tokens_.weight);
  if (dwte == nullptr) return;  // a frozen embedding
  if (!tp_.active()) {
    k::embedding_backward(ctx_, dx, tokens, dwte, dwpe, B, T, C_);
    return;
  }
  if (dwpe != nullptr && tp_.sequence_parallel()) {
    // Each rank's rows give part of the positions' gradients: summed over tp first.
    std::fill(position_grads_, position_grads_ + T * C_, 0.0f);
    k::position_embedding_backward(ctx_, dx, position_grads_, tp_.first_row(N), tp_.rows(N), T, C_);
    tp_group_->all_reduce(position_grads_, T * C_);
    k::add(ctx_, dwpe, position_grads_, dwpe, T * C_);
  } else if (dwpe != nullptr) {
    k::position_embedding_backward(ctx_, dx, dwpe, 0, N, T, C_);
  }
  const float* d_all = tp_.gather(dx, scratch_.full.f32, N);
  k::vocab_shard_embedding_backward(ctx_, d_all, tokens, dwte, vocab_.begin, vocab_.real(), N, C_);
}

}  // namespace tessera::model
