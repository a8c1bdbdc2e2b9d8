#include "tessera/model/embedding.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

Embedding::Embedding(const kernels::Context& ctx, const ModelLayout& layout,
                     const TensorParallel& tp, Collectives* tp_group,
                     const ParallelScratch& scratch, float* position_grads,
                     const SequenceSplit& split)
    : ctx_(ctx),
      tokens_(layout.outer[PartId::kTokenEmbedding]),
      positions_(layout.outer[PartId::kPositionEmbedding]),
      vocab_(layout.vocab),
      C_(layout.spec.block.d_model),
      tp_(tp),
      tp_group_(tp_group),
      scratch_(scratch),
      position_grads_(position_grads),
      split_(split) {}

namespace {

// Calls run(row, position, n) for each run of consecutive positions among rows
// [first_row, first_row + rows) of a [B, T] batch whose sequences `split` splits: rows
// [row, row + n) counted from first_row hold positions [position, position + n).
template <typename Run>
void for_each_position_run(const SequenceSplit& split, int64_t first_row, int64_t rows, int64_t T,
                           Run&& run) {
  SequenceSplit::Runs runs;
  const int64_t count = split.runs(T, runs);
  const int64_t end = first_row + rows;
  for (int64_t b = first_row / T; b * T < end; ++b) {
    for (int64_t i = 0; i < count; ++i) {
      const SequenceSplit::Run& r = runs[size_t(i)];
      const int64_t lo = std::max(b * T + r.row, first_row),
                    hi = std::min(b * T + r.row + r.n, end);
      if (lo < hi) run(lo - first_row, r.position + lo - b * T - r.row, hi - lo);
    }
  }
}

}  // namespace

void Embedding::add_positions(const float* wpe, float* x, int64_t first_row, int64_t rows,
                              int64_t T) const {
  if (!split_.active()) {
    k::position_embedding_forward(ctx_, wpe, x, first_row, rows, T, C_);
    return;
  }
  for_each_position_run(split_, first_row, rows, T, [&](int64_t row, int64_t position, int64_t n) {
    k::position_embedding_forward(ctx_, wpe + position * C_, x + row * C_, 0, n, n, C_);
  });
}

void Embedding::add_position_gradients(const float* dx, float* dwpe, int64_t first_row,
                                       int64_t rows, int64_t T) const {
  if (!split_.active()) {
    k::position_embedding_backward(ctx_, dx, dwpe, first_row, rows, T, C_);
    return;
  }
  for_each_position_run(split_, first_row, rows, T, [&](int64_t row, int64_t position, int64_t n) {
    k::position_embedding_backward(ctx_, dx + row * C_, dwpe + position * C_, 0, n, n, C_);
  });
}

void Embedding::forward(const ParamAccess& p, const int32_t* tokens, float* x, int64_t B,
                        int64_t T) const {
  const int64_t N = B * T;
  const float* wpe = positions_.weight >= 0 ? p.f32(positions_.weight) : nullptr;
  const float* wte = p.f32(tokens_.weight);
  if (!tp_.active()) {
    k::embedding_forward(ctx_, tokens, wte, split_.active() ? nullptr : wpe, x, B, T, C_);
    if (wpe != nullptr && split_.active()) add_positions(wpe, x, 0, N, T);
    return;
  }
  float* rows = tp_.sequence_parallel() ? scratch_.partial : x;
  k::vocab_shard_embedding_forward(ctx_, tokens, wte, vocab_.begin, vocab_.real(), rows, N, C_);
  tp_.complete(rows, x, N);
  if (wpe != nullptr) add_positions(wpe, x, tp_.first_row(N), tp_.rows(N), T);
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
    k::embedding_backward(ctx_, dx, tokens, dwte, split_.active() ? nullptr : dwpe, B, T, C_);
    if (dwpe != nullptr && split_.active()) add_position_gradients(dx, dwpe, 0, N, T);
    return;
  }
  if (dwpe != nullptr && tp_.sequence_parallel()) {
    // Each rank's rows give part of the positions' gradients: summed over tp first.
    const int64_t positions = split_.full_length(T) * C_;
    std::fill(position_grads_, position_grads_ + positions, 0.0f);
    add_position_gradients(dx, position_grads_, tp_.first_row(N), tp_.rows(N), T);
    tp_group_->all_reduce(position_grads_, positions);
    k::add(ctx_, dwpe, position_grads_, dwpe, positions);
  } else if (dwpe != nullptr) {
    add_position_gradients(dx, dwpe, 0, N, T);
  }
  const float* d_all = tp_.gather(dx, scratch_.full.f32, N);
  k::vocab_shard_embedding_backward(ctx_, d_all, tokens, dwte, vocab_.begin, vocab_.real(), N, C_);
}

}  // namespace tessera::model
