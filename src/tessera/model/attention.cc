#include "tessera/model/attention.h"

#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

Attention::Attention(const kernels::Context& ctx, const AttentionGeometry& geometry, int64_t C,
                     int64_t heads, int64_t kv_heads, const PartTable& parts,
                     const TensorParallel& tp, Collectives* tp_group, MatmulFormat format,
                     const ParallelScratch& scratch, uint16_t* dy_low, float* int8_scratch,
                     std::optional<SharedHeads> shared, float* scratch_per_thread,
                     float* decode_scratch, int64_t max_context, const BlockAdapters& adapters,
                     const ContextParallelAttention& context)
    : ctx_(ctx),
      g_(geometry),
      heads_(heads),
      kv_heads_(kv_heads),
      head_dim_(geometry.head_dim),
      qkv_(ctx, C, (heads + 2 * kv_heads) * geometry.head_dim, parts[PartId::kQkv], tp, tp_group,
           format, scratch, dy_low, int8_scratch, shared, adapters[PartId::kQkv]),
      proj_(ctx, heads * geometry.head_dim, C, parts[PartId::kAttentionOut], tp, format, scratch,
            dy_low, int8_scratch, adapters[PartId::kAttentionOut]),
      format_(format),
      scratch_(scratch_per_thread),
      decode_scratch_(decode_scratch),
      max_context_(max_context),
      context_(context) {
  if (parts[PartId::kQueryNorm].weight >= 0) {
    qk_norm_.emplace(ctx, geometry.norm_eps, heads, kv_heads, head_dim_, parts[PartId::kQueryNorm],
                     parts[PartId::kKeyNorm], tp.active() ? tp_group : nullptr);
  }
}

const float* Attention::whole_sequences(const float* qkv, int64_t B, int64_t T) const {
  const SequenceSplit& split = context_.split;
  const SequenceBuffers& buf = context_.buffers;
  const int64_t Q = qkv_width(), queries = heads_ * head_dim_, KV = Q - queries, N = B * T;
  copy_strided_rows(qkv + queries, Q, buf.kv_rows, KV, N, KV);
  context_.group->all_gather(buf.kv_rows, buf.by_rank, N * KV);
  for (int64_t q = 0; q < split.ranks; ++q) {
    split.to_sequences(q, buf.by_rank + q * N * KV, KV, buf.sequences + queries, Q, B, T, KV);
  }
  split.to_sequences(split.rank, qkv, Q, buf.sequences, Q, B, T, queries);
  if (g_.rope)
    k::rope_forward(ctx_, buf.sequences, B, split.full_length(T), heads_, kv_heads_, head_dim_, 0,
                    g_.rope_frequencies);
  return buf.sequences;
}

void Attention::forward(const ParamAccess& p, const MatmulInput& normed, const float* residual,
                        const AttentionActivations& a, float* out, int64_t B, int64_t T) const {
  const int64_t N = B * T;
  qkv_.forward(p, normed, a.qkv, N);
  if (qk_norm_) qk_norm_->forward(p, a.qkv, a.qk_norm_input, a.qk_norm_rstd, N);
  const SequenceSplit& split = context_.split;
  if (split.active()) {
    k::attention_forward(ctx_, whole_sequences(a.qkv, B, T), a.out.f32, a.lse, scratch_, B,
                         split.full_length(T), heads_, kv_heads_, head_dim_, a.doc_start,
                         split.queries(T));
  } else {
    if (g_.rope)
      k::rope_forward(ctx_, a.qkv, B, T, heads_, kv_heads_, head_dim_, 0, g_.rope_frequencies);
    k::attention_forward(ctx_, a.qkv, a.out.f32, a.lse, scratch_, B, T, heads_, kv_heads_,
                         head_dim_, a.doc_start);
  }
  format_.finish(ctx_, a.out, N * heads_ * head_dim_);
  proj_.forward(p, a.out, residual, out, N);
}

void Attention::decode(const ParamAccess& p, const MatmulInput& normed, const float* residual,
                       const AttentionActivations& a, float* out, const k::PagedKv& kv,
                       std::span<const k::PagedChunk> chunks, int64_t N) const {
  const int64_t Q = qkv_width(), hd = head_dim_;
  qkv_.forward(p, normed, a.qkv, N);
  if (qk_norm_) qk_norm_->forward(p, a.qkv, nullptr, nullptr, N);
  for (const k::PagedChunk& chunk : chunks) {
    float* rows = a.qkv + chunk.row * Q;
    if (g_.rope)
      k::rope_forward(ctx_, rows, 1, chunk.n, heads_, kv_heads_, hd, chunk.start,
                      g_.rope_frequencies);
    k::paged_kv_write(ctx_, rows + heads_ * hd, rows + (heads_ + kv_heads_) * hd, Q, kv, chunk);
  }
  k::paged_attention_forward(ctx_, a.qkv, Q, a.out.f32, heads_ * hd, kv, chunks.data(),
                             int64_t(chunks.size()), heads_, decode_scratch_, max_context_);
  format_.finish(ctx_, a.out, N * heads_ * hd);
  proj_.forward(p, a.out, residual, out, N);
}

const float* Attention::backward(const ParamAccess& p, const float* d_out,
                                 const MatmulInput& normed, const AttentionActivations& a,
                                 float* d_scratch, float* d_qkv, int64_t B, int64_t T,
                                 const AttentionHeld* held) {
  const int64_t N = B * T;
  proj_.backward(p, d_out, a.out, d_scratch, N, held != nullptr ? &held->out : nullptr);
  const SequenceSplit& split = context_.split;
  if (split.active()) {
    // The whole sequences' gradients: this rank's query rows are its own, and every rank's keys
    // and values are summed over the ranks onto the one that holds them.
    const SequenceBuffers& buf = context_.buffers;
    const int64_t full = split.full_length(T), Q = qkv_width(), queries = heads_ * head_dim_;
    const int64_t KV = Q - queries;
    k::attention_backward(ctx_, d_scratch, whole_sequences(a.qkv, B, T), a.lse, buf.sequence_grads,
                          scratch_, B, full, heads_, kv_heads_, head_dim_, a.doc_start,
                          split.queries(T));
    if (g_.rope)
      k::rope_backward(ctx_, buf.sequence_grads, B, full, heads_, kv_heads_, head_dim_, 0,
                       g_.rope_frequencies);
    for (int64_t q = 0; q < split.ranks; ++q) {
      split.to_rows(q, buf.sequence_grads + queries, Q, buf.by_rank + q * N * KV, KV, B, T, KV);
    }
    context_.group->reduce_scatter(buf.by_rank, buf.kv_rows, N * KV);
    split.to_rows(split.rank, buf.sequence_grads, Q, d_qkv, Q, B, T, queries);
    copy_strided_rows(buf.kv_rows, KV, d_qkv + queries, Q, N, KV);
  } else {
    k::attention_backward(ctx_, d_scratch, a.qkv, a.lse, d_qkv, scratch_, B, T, heads_, kv_heads_,
                          head_dim_, a.doc_start);
    if (g_.rope)
      k::rope_backward(ctx_, d_qkv, B, T, heads_, kv_heads_, head_dim_, 0, g_.rope_frequencies);
  }
  if (qk_norm_) qk_norm_->backward(p, d_qkv, a.qk_norm_input, a.qk_norm_rstd, N);
  return qkv_.backward(p, d_qkv, normed, N, held != nullptr ? &held->qkv : nullptr);
}

void Attention::weight_backward(const ParamAccess& p, const AttentionHeld& held, int64_t N) const {
  proj_.held_weight_backward(p, held.out, N);
  qkv_.held_weight_backward(p, held.qkv, N);
}

}  // namespace tessera::model
