#pragma once

#include <cstdint>
#include <span>

#include "tessera/kernels/context.h"
#include "tessera/kernels/paged_attention.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/layer.h"
#include "tessera/model/parallel_linear.h"
#include "tessera/model/qk_norm.h"

namespace tessera::model {

// What attention keeps for its backward, over N tokens: q/k/v [N, qkv], the log-sum-exp of each
// score row [N, heads] and the attention output [N, heads * head_dim] (a matmul input); with
// QK-norm, its input and statistics (qk_norm.h).
struct AttentionActivations {
  float* qkv;
  float* lse;
  MatmulInput out;
  float* qk_norm_input = nullptr;
  float* qk_norm_rstd = nullptr;
  const int32_t* doc_start = nullptr;  // see kernels::attention_forward
};

// What the qkv and output projections hold until their weight gradients (HeldGradient).
struct AttentionHeld {
  HeldGradient qkv, out;
};

// Context parallelism's working buffers, over N tokens of this rank, cp ranks and Q = qkv
// columns, of which KV are keys and values: this rank's keys and values packed [N, KV], every
// rank's [cp, N, KV] (gathered, and the gradients to reduce-scatter), and the whole sequences' q, k
// and v and their gradients [cp N, Q] each.
struct SequenceBuffers {
  float *kv_rows = nullptr, *by_rank = nullptr, *sequences = nullptr, *sequence_grads = nullptr;
};

// Context parallelism in attention: how the sequences are split, over which group.
struct ContextParallelAttention {
  SequenceSplit split;
  Collectives* group = nullptr;
  SequenceBuffers buffers;
};

// Causal self-attention over this rank's heads: the column-parallel qkv projection, QK-norm
// (where the parts have it), rotary positions (Llama), attention, and the row-parallel output
// projection into the residual stream. Over sequences split by context parallelism, it
// all-gathers their keys and values (as Llama 3 trained) and computes its own rows' attention
// over them; backward gathers them again and reduce-scatters their gradients onto the ranks that
// hold their rows.
class Attention {
 public:
  // heads and kv_heads are this rank's; shared says which kv rows it holds alike with others.
  Attention(const kernels::Context& ctx, const AttentionGeometry& geometry, int64_t C,
            int64_t heads, int64_t kv_heads, const PartTable& parts, const TensorParallel& tp,
            Collectives* tp_group, MatmulFormat format, const ParallelScratch& scratch,
            uint16_t* dy_low, float* int8_scratch, std::optional<SharedHeads> shared,
            float* scratch_per_thread, float* decode_scratch, int64_t max_context,
            const BlockAdapters& adapters, const ContextParallelAttention& context = {});

  // normed: this rank's rows of the attention norm's output; out = residual + attention.
  void forward(const ParamAccess& p, const MatmulInput& normed, const float* residual,
               const AttentionActivations& a, float* out, int64_t B, int64_t T) const;
  // Over a paged cache (one rank): each chunk's queries attend over its cached positions, and its
  // keys and values are written there.
  void decode(const ParamAccess& p, const MatmulInput& normed, const float* residual,
              const AttentionActivations& a, float* out, const kernels::PagedKv& kv,
              std::span<const kernels::PagedChunk> chunks, int64_t N) const;
  // d_out: dL/d(out) on this rank's rows. Returns dL/d(normed) for them; d_scratch [N, max(C,
  // heads * head_dim)] and d_qkv [N, qkv] are working space. With `held`, the projections' weight
  // gradients wait for weight_backward.
  const float* backward(const ParamAccess& p, const float* d_out, const MatmulInput& normed,
                        const AttentionActivations& a, float* d_scratch, float* d_qkv, int64_t B,
                        int64_t T, const AttentionHeld* held = nullptr);
  void weight_backward(const ParamAccess& p, const AttentionHeld& held, int64_t N) const;

  int64_t qkv_width() const { return (heads_ + 2 * kv_heads_) * head_dim_; }

 private:
  // B whole sequences of q, k and v in context_.buffers.sequences, rotated (Llama) at their
  // positions: every rank's keys and values, gathered, and this rank's queries from its rows
  // `qkv` [B, T, qkv]; the other ranks' query rows are not read.
  const float* whole_sequences(const float* qkv, int64_t B, int64_t T) const;

  const kernels::Context& ctx_;
  AttentionGeometry g_;
  int64_t heads_, kv_heads_, head_dim_;
  ColumnParallelLinear qkv_;
  RowParallelLinear proj_;
  std::optional<QkNorm> qk_norm_;
  MatmulFormat format_;
  float* scratch_;
  float* decode_scratch_;
  int64_t max_context_;
  ContextParallelAttention context_;
};

}  // namespace tessera::model
