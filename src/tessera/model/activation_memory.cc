#include "tessera/model/activation_memory.h"

#include <algorithm>

#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/ops.h"
#include "tessera/kernels/paged_attention.h"
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

ModelActivations allocate_activations(const ModelConfig& c, const ModelLayout& layout,
                                      const ActivationOptions& o, Allocator& a) {
  const BlockSpec& spec = layout.spec.block;
  const Sharding& sharding = layout.sharding;
  const BlockWidths w(spec, sharding);
  const bool low = o.precision != Precision::kF32, moe = spec.moe.has_value();
  const bool sp = o.sequence_parallel && sharding.tp > 1;
  const bool layer_norm = spec.norm == NormKind::kLayerNorm;
  const int64_t N = o.max_batch * o.max_seq, R = sp ? N / sharding.tp : N, C = w.C;
  const int64_t HD = w.attention_out, Q = w.qkv, F = w.ffn, F_pre = w.mlp_in;
  ModelActivations m;

  auto matmul_input = [&](int64_t n, float* shared_f32) {
    return MatmulInput{low ? shared_f32 : a.floats(n), low ? a.halves(n) : nullptr};
  };
  // A norm's output: the matmul input of R rows, or with sequence parallelism f32 rows that are
  // gathered (and narrowed) when a matmul reads them.
  auto norm_output = [&](float* shared_f32) {
    if (sp) return MatmulInput{a.floats(R * C), nullptr};
    return matmul_input(R * C, shared_f32);
  };
  // What a block keeps in f32 unless fully recomputed: norm statistics, q/k/v, the attention
  // log-sum-exp, the residual after attention and the MLP's first matmul output.
  auto allocate_f32_state = [&](BlockActivations& x) {
    x.ln1_mean = layer_norm ? a.floats(R) : nullptr;
    x.ln1_rstd = a.floats(R);
    x.qkv = a.floats(N * Q);
    x.lse = a.floats(N * w.heads);
    x.res_mid = a.floats(R * C);
    x.ln2_mean = layer_norm ? a.floats(R) : nullptr;
    x.ln2_rstd = a.floats(R);
    x.fch = moe ? nullptr : a.floats(N * F_pre);
  };
  // The working set every block shares: all of a block's activations when nothing is kept per
  // block (inference, full recompute), and the transient f32 copies of matmul inputs.
  const int64_t before_working = a.bytes();
  BlockActivations shared;
  shared.ln1 = {a.floats(R * C), low && !sp ? a.halves(R * C) : nullptr};
  shared.atty = {a.floats(N * HD), low ? a.halves(N * HD) : nullptr};
  shared.ln2 = {a.floats(R * C), low && !sp ? a.halves(R * C) : nullptr};
  shared.act = moe ? MatmulInput{} : MatmulInput{a.floats(N * F), low ? a.halves(N * F) : nullptr};
  allocate_f32_state(shared);
  shared.res_out = a.floats(R * C);
  m.working = a.bytes() - before_working;

  // A linear's input as its held weight gradient reads it: `kept`, the block's own saved
  // activation, or a copy where recomputation shares it; `rows`: a norm output, which sequence
  // parallelism keeps in f32 and gathers again. Its output gradient [N, out] is always a copy.
  auto held = [&](const MatmulInput& kept, bool saved, bool rows, int64_t n, int64_t out) {
    HeldGradient h;
    if (rows && sp) {
      h.x.f32 = saved ? kept.f32 : a.floats(n);
    } else if (low) {
      h.x.low = saved ? kept.low : a.halves(n);
    } else {
      h.x.f32 = saved ? kept.f32 : a.floats(n);
    }
    if (low) {
      h.dy.low = a.halves(N * out);
    } else {
      h.dy.f32 = a.floats(N * out);
    }
    return h;
  };
  auto hold_weight_gradients = [&](BlockActivations& b) {
    const bool norms_saved = o.recompute == Recompute::kNone;
    b.attention_held = {held(b.ln1, norms_saved, true, R * C, Q),
                        held(b.atty, o.recompute != Recompute::kFull, false, N * HD, C)};
    if (!moe) {
      b.mlp_held = {held(b.ln2, norms_saved, true, R * C, F_pre),
                    held(b.act, norms_saved, false, N * F, C)};
    }
  };

  const int64_t blocks = int64_t(layout.blocks.size());
  // What each block of a micro-batch keeps for its backward: views of the shared set where it
  // keeps nothing. With `sent_on`, the last block writes slot 0's output buffer.
  auto saved_blocks = [&](bool sent_on) {
    std::vector<BlockActivations> saved(blocks, shared);
    if (!o.training) return saved;
    for (BlockActivations& b : saved) {
      const int64_t before = a.bytes();
      const bool last = &b == &saved.back();
      b.res_out = last && sent_on ? m.blocks.back().res_out : a.floats(R * C);
      if (o.recompute != Recompute::kFull) {
        if (o.recompute == Recompute::kNone) {
          b.ln1 = norm_output(shared.ln1.f32);
          b.ln2 = norm_output(shared.ln2.f32);
          if (!moe) b.act = matmul_input(N * F, shared.act.f32);
        }
        b.atty = matmul_input(N * HD, shared.atty.f32);
        const int64_t before_state = a.bytes();
        allocate_f32_state(b);
        m.saved_f32_state_per_layer = a.bytes() - before_state;
      }
      if (o.split_backward) hold_weight_gradients(b);
      if (!last || !sent_on) m.saved_per_layer = a.bytes() - before;
    }
    return saved;
  };
  m.blocks = saved_blocks(false);
  m.embedded = a.floats(R * C);
  m.stage_input = 4 * R * C;
  m.slot_blocks = {m.blocks};
  m.slot_inputs = {m.embedded};
  for (int64_t slot = 1; slot < o.in_flight; ++slot) {
    m.slot_blocks.push_back(saved_blocks(!layout.has_head));
    m.slot_inputs.push_back(a.floats(R * C));
  }
  if (layout.has_head) {
    m.lnf = {a.floats(R * C), low && !sp ? a.halves(R * C) : nullptr};
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
  ws.attention_scratch = a.floats(kernels::attention_scratch_size(o.max_seq) * o.threads);
  if (!o.training) {
    ws.decode_scratch = a.floats(kernels::paged_attention_scratch_size(c.max_seq) * o.threads);
  }
  if (o.weights == WeightFormat::kInt8) {
    ws.int8_scratch = a.floats(kernels::int8_linear_scratch_size(std::max({C, HD, F}), N));
  }
  ParallelScratch& ps = ws.parallel;
  if (sp) {
    ps.full = {a.floats(N * C), low ? a.halves(N * C) : nullptr};
    ps.partial = a.floats(N * C);
  }
  if (o.training) {
    m.d_res = a.floats(R * C);
    ps.d_input = a.floats(N * std::max(C, HD));
    ws.d_qkv = a.floats(N * Q);
    const int64_t hidden = F_pre + (spec.activation == Activation::kSwiglu ? F : 0);
    ws.d_hidden = moe ? nullptr : a.floats(N * hidden);
    if (low) ws.dy_low = a.halves(N * std::max({C, Q, F_pre, layout.vocab.local}));
    if (sp) ps.d_rows = a.floats(R * C);
    if (spec.attention.kv_heads < sharding.tp) {
      ps.shared_rows = a.floats((Q + 2 * spec.attention.kv_heads * w.head_dim) * C);
    }
    if (sp && layer_norm && layout.has_embedding) m.position_grads = a.floats(c.max_seq * C);
  } else if (moe && sp) {
    ps.d_input = a.floats(N * C);  // the mixture of experts' output before this rank's rows
  }
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
    const int64_t scratch = 4 * moe_scratch_floats(c.moe, C, F, N, sharding.ep, o.batch_ranks);
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
