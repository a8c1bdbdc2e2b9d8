#include "tessera/model/activation_memory.h"

#include <algorithm>

#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/ops.h"
#include "tessera/kernels/paged_attention.h"
#include "tessera/kernels/q4_linear.h"
#include "tessera/kernels/q4k_linear.h"
#include "tessera/model/moe_layer.h"

namespace tessera::model {

float* Allocator::floats(int64_t n) {
  bytes_ += 4 * n;
  return arena_.allocate({n}, DType::f32).as<float>();
}

uint16_t* Allocator::halves(int64_t n) {
  bytes_ += 2 * n;
  return static_cast<uint16_t*>(arena_.allocate({n}, DType::bf16).data);
}

int32_t* Allocator::ints(int64_t n) {
  bytes_ += 4 * n;
  return arena_.allocate({n}, DType::i32).as<int32_t>();
}

namespace {

// What a model's shape gives every buffer: rows, widths and formats.
struct Shapes {
  const BlockSpec& spec;
  BlockWidths w;
  bool low, sp, moe;
  int64_t N, R;

  Shapes(const ModelLayout& layout, const ActivationOptions& o)
      : spec(layout.spec.block),
        w(spec, layout.sharding),
        low(o.precision != Precision::kF32),
        sp(o.sequence_parallel && layout.sharding.tp > 1),
        moe(spec.moe.has_value()),
        N(o.max_batch * o.max_seq),
        R(sp ? N / layout.sharding.tp : N) {}

  int64_t floats(const SavedActivation& s) const {
    return (s.residual_rows ? R : N) * floats_per_row(s.width, w);
  }
  // A matmul input over the residual rows is gathered from f32 rows with sequence parallelism,
  // and narrowed when a matmul reads it.
  bool held_low(const SavedActivation& s) const {
    return low && s.matmul_operand && !(sp && s.residual_rows);
  }
};

template <typename Body>
void for_each_saved(const BlockSpec& spec, Body&& body) {
  for (const Part& p : spec.parts) {
    for (const SavedActivation& s : p.saves) body(s);
  }
}

// The working set every block shares: all of a block's activations when nothing is kept per block
// (inference, full recompute), and the f32 copies of low-precision matmul inputs.
BlockActivations shared_activations(const Shapes& x, Allocator& a) {
  BlockActivations shared;
  for_each_saved(x.spec, [&](const SavedActivation& s) {
    const int64_t n = x.floats(s);
    shared[s.id] = {a.floats(n), x.held_low(s) ? a.halves(n) : nullptr};
  });
  shared.res_out = a.floats(x.R * x.w.C);
  return shared;
}

// A linear's input as its held weight gradient reads it: `kept`, the block's own saved
// activation, or a copy where recomputation shares it; `rows`: a norm output, which sequence
// parallelism keeps in f32 and gathers again. Its output gradient [N, out] is always a copy.
HeldGradient held(const Shapes& x, Allocator& a, const MatmulInput& kept, bool saved, bool rows,
                  int64_t n, int64_t out) {
  HeldGradient h;
  if (rows && x.sp) {
    h.x.f32 = saved ? kept.f32 : a.floats(n);
  } else if (x.low) {
    h.x.low = saved ? kept.low : a.halves(n);
  } else {
    h.x.f32 = saved ? kept.f32 : a.floats(n);
  }
  if (x.low) {
    h.dy.low = a.halves(x.N * out);
  } else {
    h.dy.f32 = a.floats(x.N * out);
  }
  return h;
}

void hold_weight_gradients(const Shapes& x, const ActivationOptions& o, Allocator& a,
                           BlockActivations& b) {
  const BlockWidths& w = x.w;
  const bool norms_saved = o.recompute == Recompute::kNone;
  const int64_t R = x.R, N = x.N, C = w.C;
  b.attention_held = {
      held(x, a, b[ActivationId::kAttentionNormOutput], norms_saved, true, R * C, w.qkv),
      held(x, a, b[ActivationId::kAttentionOutput], o.recompute != Recompute::kFull, false,
           N * w.attention_out, C)};
  if (!x.moe) {
    b.mlp_held = {held(x, a, b[ActivationId::kMlpNormOutput], norms_saved, true, R * C, w.mlp_in),
                  held(x, a, b[ActivationId::kMlpActivation], norms_saved, false, N * w.ffn, C)};
  }
}

// What one block of a micro-batch keeps for its backward: its own buffers for what its
// recomputation keeps, views of the shared set for the rest. Returns the bytes of its f32 state.
int64_t keep_per_block(const Shapes& x, const ActivationOptions& o, const BlockActivations& shared,
                       Allocator& a, BlockActivations& b) {
  int64_t f32_state = 0;
  for_each_saved(x.spec, [&](const SavedActivation& s) {
    if (o.recompute >= s.dropped_by) return;
    const int64_t n = x.floats(s);
    if (!s.matmul_operand) f32_state += 4 * n;
    b[s.id] = x.held_low(s) ? MatmulInput{shared[s.id].f32, a.halves(n)}
                            : MatmulInput{a.floats(n), nullptr};
  });
  return f32_state;
}

// The buffers outside the blocks: the head's, the shared scratch of attention and decoding, and
// the backward's gradients and tensor-parallel scratch.
void allocate_outside_blocks(const ModelConfig& c, const ModelLayout& layout, const Shapes& x,
                             const ActivationOptions& o, Allocator& a, ModelActivations& m) {
  const BlockWidths& w = x.w;
  const int64_t N = x.N, R = x.R, C = w.C, HD = w.attention_out, F = w.ffn;
  const bool layer_norm = x.spec.norm == NormKind::kLayerNorm;
  const Sharding& sharding = layout.sharding;
  if (layout.has_head) {
    m.lnf = {a.floats(R * C), x.low && !x.sp ? a.halves(R * C) : nullptr};
    m.lnf_mean = layer_norm ? a.floats(R) : nullptr;
    m.lnf_rstd = a.floats(R);
    m.logits = a.floats(N * layout.vocab.local);
    m.losses = a.floats(N);
    if (sharding.tp > 1) {
      m.row_stats = a.floats(3 * N);
      m.rank_maxima = a.floats(sharding.tp * N);
    }
  }
  BlockWorkspace& ws = m.workspace;
  ws.attention_scratch =
      a.floats(kernels::attention_scratch_size(o.context_ranks * o.max_seq) * o.threads);
  if (o.context_ranks > 1) {
    const int64_t kv = w.qkv - w.attention_out, sequences = o.context_ranks * N * w.qkv;
    ws.sequences = {a.floats(N * kv), a.floats(o.context_ranks * N * kv), a.floats(sequences),
                    a.floats(sequences)};
  }
  if (!o.training) {
    ws.decode_scratch = a.floats(kernels::paged_attention_scratch_size(c.max_seq) * o.threads);
  }
  if (const LoraScratch lora = lora_scratch(x.spec); lora.down > 0) {
    ws.lora_u = a.floats(N * lora.down);
    if (o.training) ws.lora_du = a.floats(N * lora.down);
    if (o.training && (x.low || x.spec.lora_dropout > 0)) ws.lora_x = a.floats(N * lora.input);
  }
  if (o.weights != WeightFormat::kDense) {
    // A 4-bit model's head multiplies in int8, and a q4_k model's narrow matrices in q4_0.
    const int64_t widest = std::max({C, HD, F});
    ws.int8_scratch = a.floats(std::max({kernels::int8_linear_scratch_size(widest, N),
                                         kernels::q4_linear_scratch_size(widest, N),
                                         kernels::q4k_linear_scratch_size(widest, N)}));
  }
  ParallelScratch& ps = ws.parallel;
  if (x.sp) {
    ps.full = {a.floats(N * C), x.low ? a.halves(N * C) : nullptr};
    ps.partial = a.floats(N * C);
  }
  if (o.training) {
    m.d_res = a.floats(R * C);
    ps.d_input = a.floats(N * std::max(C, HD));
    ws.d_qkv = a.floats(N * w.qkv);
    const int64_t hidden = w.mlp_in + (x.spec.activation == Activation::kSwiglu ? F : 0);
    ws.d_hidden = x.moe ? nullptr : a.floats(N * hidden);
    if (x.low) ws.dy_low = a.halves(N * std::max({C, w.qkv, w.mlp_in, layout.vocab.local}));
    if (x.sp) ps.d_rows = a.floats(R * C);
    if (x.spec.attention.kv_heads < sharding.tp) {
      ps.shared_rows = a.floats((w.qkv + 2 * x.spec.attention.kv_heads * w.head_dim) * C);
    }
    if (x.sp && layer_norm && layout.has_embedding) m.position_grads = a.floats(c.max_seq * C);
  } else if (x.moe && x.sp) {
    ps.d_input = a.floats(N * C);  // the mixture of experts' output before this rank's rows
  }
}

}  // namespace

ModelActivations allocate_activations(const ModelConfig& c, const ModelLayout& layout,
                                      const ActivationOptions& o, Allocator& a) {
  const Shapes x(layout, o);
  const int64_t R = x.R, C = x.w.C;
  ModelActivations m;
  const int64_t before_working = a.bytes();
  const BlockActivations shared = shared_activations(x, a);
  m.working = a.bytes() - before_working;

  const int64_t blocks = int64_t(layout.blocks.size());
  // Each block of a micro-batch: with `sent_on`, the last block writes slot 0's output buffer.
  auto saved_blocks = [&](bool sent_on) {
    std::vector<BlockActivations> saved(blocks, shared);
    if (!o.training) return saved;
    for (BlockActivations& b : saved) {
      const int64_t before = a.bytes();
      const bool last = &b == &saved.back();
      b.res_out = last && sent_on ? m.blocks.back().res_out : a.floats(R * C);
      m.saved_f32_state_per_layer = keep_per_block(x, o, shared, a, b);
      if (o.split_backward) hold_weight_gradients(x, o, a, b);
      if (!last || !sent_on) m.saved_per_layer = a.bytes() - before;
    }
    return saved;
  };
  // A slot's blocks read its document starts.
  auto with_doc_starts = [&](std::vector<BlockActivations> saved) {
    if (!o.document_mask) return saved;
    m.slot_doc_starts.push_back(a.ints(o.context_ranks * o.max_batch * o.max_seq));
    for (BlockActivations& b : saved) b.doc_start = m.slot_doc_starts.back();
    return saved;
  };
  m.blocks = with_doc_starts(saved_blocks(false));
  m.embedded = a.floats(R * C);
  m.stage_input = 4 * R * C;
  m.slot_blocks = {m.blocks};
  m.slot_inputs = {m.embedded};
  for (int64_t slot = 1; slot < o.in_flight; ++slot) {
    m.slot_blocks.push_back(with_doc_starts(saved_blocks(!layout.has_head)));
    m.slot_inputs.push_back(a.floats(R * C));
  }
  allocate_outside_blocks(c, layout, x, o, a, m);
  m.total = a.bytes();
  return m;
}

ActivationBytes activation_bytes(const ModelConfig& c, const Sharding& sharding,
                                 const ActivationOptions& o) {
  return activation_bytes(c, model_layout(c, sharding), o);
}

ActivationBytes activation_bytes(const ModelConfig& c, const ModelLayout& layout,
                                 const ActivationOptions& o) {
  const Sharding& sharding = layout.sharding;
  const int64_t blocks = int64_t(layout.blocks.size());
  Arena arena = Arena::counting();
  Allocator counter(arena);
  const ModelActivations m = allocate_activations(c, layout, o, counter);
  ActivationBytes b{m.saved_per_layer, m.working, m.total};
  b.saved_f32_state_per_layer = m.saved_f32_state_per_layer;
  // A further micro-batch keeps the stage's input and what its blocks save. A stage without the
  // head only sends its last block's output on, so that block's output buffer is not kept, and
  // the input takes its place.
  b.per_micro_batch = m.saved_per_layer * blocks + (layout.has_head ? m.stage_input : 0);
  if (c.is_moe()) {
    // The MoE layers keep their values outside the arena: one per block when blocks keep their
    // activations, else one that every block uses in turn; all of them share one scratch.
    const int64_t N = o.max_batch * o.max_seq, C = c.d_model, F = c.ffn();
    const int64_t moe = 4 * moe_activation_floats(c.moe, C, F, N, sharding.ep, o.batch_ranks);
    const int64_t scratch =
        4 * moe_scratch_floats(c.moe, C, F, N, sharding.ep, o.batch_ranks, expert_lora_rank(c));
    const bool per_layer = o.training && o.recompute != Recompute::kFull;
    (per_layer ? b.saved_per_layer : b.working) += moe;
    if (per_layer) b.per_micro_batch += moe * blocks;
    b.working += scratch;
    b.total += (per_layer ? moe * blocks * o.in_flight : moe) + scratch;
  }
  return b;
}

int64_t saved_activation_bytes_per_layer(const ModelConfig& config, int64_t tokens, Precision p,
                                         Recompute r) {
  ActivationOptions o;
  o.max_seq = tokens;
  o.training = true;
  o.precision = p;
  o.recompute = r;
  return activation_bytes(config, Sharding{}, o).saved_per_layer;
}

}  // namespace tessera::model
