#include "tessera/model/block.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

BlockWidths::BlockWidths(const BlockSpec& spec, const Sharding& s) {
  const AttentionGeometry& a = spec.attention;
  C = spec.d_model;
  heads = a.heads / s.tp;
  kv_heads = a.kv_heads >= s.tp ? a.kv_heads / s.tp : 1;
  head_dim = a.head_dim;
  qkv = (heads + 2 * kv_heads) * head_dim;
  attention_out = heads * head_dim;
  ffn = spec.ffn / s.tp;
  mlp_in = spec.activation == Activation::kSwiglu ? 2 * ffn : ffn;
}

Block::Block(const ModelSpec& spec, const ModelLayout& layout, int64_t layer,
             const ModelParallel& parallel, MatmulFormat format, const BlockWorkspace& workspace,
             const BlockActivations& activations, MoeLayer<float>* moe, int64_t max_context)
    : spec_(spec.block),
      w_(spec.block, layout.sharding),
      parts_(layout.blocks[layer]),
      tp_(parallel, spec.block.d_model),
      tp_group_(parallel.tp),
      format_(format),
      ws_(workspace),
      a_(activations),
      ln1_(spec_.norm, spec_.norm_eps, w_.C, parts_[PartId::kAttentionNorm], format,
           tp_.sequence_parallel() ? parallel.tp : nullptr),
      ln2_(spec_.norm, spec_.norm_eps, w_.C, parts_[PartId::kMlpNorm], format,
           tp_.sequence_parallel() ? parallel.tp : nullptr),
      qkv_(w_.C, w_.qkv, parts_[PartId::kQkv], format, ws_.dy_low, ws_.int8_scratch),
      proj_(w_.attention_out, w_.C, parts_[PartId::kAttentionOut], format, ws_.dy_low,
            ws_.int8_scratch),
      moe_(moe),
      max_context_(max_context) {
  if (!spec_.moe) {
    fc_ = std::make_unique<Linear>(w_.C, w_.mlp_in, parts_[PartId::kMlpIn], format, ws_.dy_low,
                                   ws_.int8_scratch);
    fcproj_ = std::make_unique<Linear>(w_.ffn, w_.C, parts_[PartId::kMlpOut], format, ws_.dy_low,
                                       ws_.int8_scratch);
  }
  const Sharding& s = layout.sharding;
  kv_replicated_ = spec_.attention.kv_heads < s.tp;
  kv_head_ = s.tp_rank * spec_.attention.kv_heads / s.tp;
}

MatmulInput Block::column_input(const MatmulInput& rows, int64_t N) const {
  if (!tp_.sequence_parallel()) return rows;
  tp_.gather(rows.f32, ws_.full.f32, N);
  format_.finish(ws_.full, N * w_.C);
  return ws_.full;
}

// out = residual + the completed output of a row-parallel linear, its bias added once.
void Block::row_output(const ParamAccess& p, const Linear& linear, const MatmulInput& in,
                       const float* residual, float* out, int64_t N) {
  const int64_t R = tp_.rows(N);
  if (!tp_.active()) {
    linear.forward(p, in, out, N);
  } else {
    float* partial = tp_.sequence_parallel() ? ws_.partial : out;
    linear.forward(p, in, partial, N, /*with_bias=*/false);
    tp_.complete(partial, out, N);
    if (linear.params().bias >= 0) k::add_bias(out, p.f32(linear.params().bias), R, w_.C);
  }
  k::add(residual, out, out, R * w_.C);
}

void Block::attention_forward(const ParamAccess& p, const float* x, int64_t B, int64_t T) {
  const int64_t N = B * T;
  const AttentionGeometry& g = spec_.attention;
  ln1_.forward(p, x, a_.ln1, a_.ln1_mean, a_.ln1_rstd, tp_.rows(N));
  qkv_.forward(p, column_input(a_.ln1, N), a_.qkv, N);
  if (g.rope) k::rope_forward(a_.qkv, B, T, w_.heads, w_.kv_heads, w_.head_dim, 0, g.rope_theta);
  k::attention_forward(a_.qkv, a_.atty.f32, a_.lse, ws_.attention_scratch, B, T, w_.heads,
                       w_.kv_heads, w_.head_dim);
}

MoeWeights<float> Block::moe_weights(const ParamAccess& p) const {
  auto at = [&](PartId id) {
    const int64_t o = parts_[id].weight;
    return o >= 0 ? p.f32(o) : nullptr;
  };
  return {at(PartId::kRouter), at(PartId::kExpertsIn), at(PartId::kExpertsOut),
          at(PartId::kSharedIn), at(PartId::kSharedOut)};
}

// The rest of a block once attention has written atty: projection, residual, norm, MLP (dense or
// mixture of experts), residual.
void Block::finish_forward(const ParamAccess& p, const float* x, int64_t N) {
  const int64_t R = tp_.rows(N), C = w_.C;
  format_.finish(a_.atty, N * w_.attention_out);
  row_output(p, proj_, a_.atty, x, a_.res_mid, N);
  ln2_.forward(p, a_.res_mid, a_.ln2, a_.ln2_mean, a_.ln2_rstd, R);
  if (moe_ != nullptr) {
    // Every tensor-parallel rank runs the mixture of experts over all N tokens; with sequence
    // parallelism it keeps its own rows of the result.
    const bool sp = tp_.sequence_parallel();
    const float* in = tp_.gather(a_.ln2.f32, ws_.partial, N);
    float* out = sp ? ws_.d_c : a_.res_out;
    moe_aux_ = moe_->forward(in, out, N, moe_weights(p));
    if (sp) std::memcpy(a_.res_out, out + tp_.first_row(N) * C, sizeof(float) * R * C);
    k::add(a_.res_mid, a_.res_out, a_.res_out, R * C);
    return;
  }
  fc_->forward(p, column_input(a_.ln2, N), a_.fch, N);
  if (spec_.activation == Activation::kGelu) {
    k::gelu_forward(a_.fch, a_.act.f32, N * w_.ffn);
  } else {
    k::swiglu_forward(a_.fch, a_.act.f32, N, w_.ffn);
  }
  format_.finish(a_.act, N * w_.ffn);
  row_output(p, *fcproj_, a_.act, a_.res_mid, a_.res_out, N);
}

double Block::forward(const ParamAccess& p, const float* x, int64_t B, int64_t T) {
  moe_aux_ = 0;
  attention_forward(p, x, B, T);
  finish_forward(p, x, B * T);
  return moe_aux_;
}

void Block::decode(const ParamAccess& p, const float* x, const k::PagedKv& kv,
                   std::span<const k::PagedChunk> chunks, int64_t N) {
  check(!tp_.active(),
        "decoding runs on one rank: the model is split over {} tensor-parallel "
        "ranks",
        tp_.ranks());
  const AttentionGeometry& g = spec_.attention;
  const int64_t Q = w_.qkv, hd = w_.head_dim, H = w_.heads, KVH = w_.kv_heads;
  ln1_.forward(p, x, a_.ln1, a_.ln1_mean, a_.ln1_rstd, N);
  qkv_.forward(p, a_.ln1, a_.qkv, N);
  for (const k::PagedChunk& chunk : chunks) {
    float* rows = a_.qkv + chunk.row * Q;
    if (g.rope) k::rope_forward(rows, 1, chunk.n, H, KVH, hd, chunk.start, g.rope_theta);
    k::paged_kv_write(rows + H * hd, rows + (H + KVH) * hd, Q, kv, chunk);
  }
  k::paged_attention_forward(a_.qkv, Q, a_.atty.f32, H * hd, kv, chunks.data(),
                             int64_t(chunks.size()), H, ws_.decode_scratch, max_context_);
  finish_forward(p, x, N);
}

// Brings back what selective recomputation dropped: the norm outputs and the MLP activation.
// With MoE in low precision the router needs the f32 norm output, which is transient too.
void Block::recompute_selected(const ParamAccess& p, const float* x, int64_t N) {
  const int64_t R = tp_.rows(N);
  ln1_.forward(p, x, a_.ln1, a_.ln1_mean, a_.ln1_rstd, R);
  ln2_.forward(p, a_.res_mid, a_.ln2, a_.ln2_mean, a_.ln2_rstd, R);
  if (moe_ != nullptr) return;
  if (spec_.activation == Activation::kGelu) {
    k::gelu_forward(a_.fch, a_.act.f32, N * w_.ffn);
  } else {
    k::swiglu_forward(a_.fch, a_.act.f32, N, w_.ffn);
  }
  format_.finish(a_.act, N * w_.ffn);
}

// The qkv linear's backward into ws_.d_c. When this rank's kv head is shared with other ranks,
// each holds a partial gradient of its weights: the kv rows' gradients of every rank meet in a
// buffer of all kv heads, are summed over tp, and each rank adds its own head's sum.
void Block::qkv_backward(const ParamAccess& p, const MatmulInput& x, int64_t N) {
  if (!kv_replicated_) {
    qkv_.backward(p, ws_.d_qkv, x, ws_.d_c, N);
    return;
  }
  check(parts_[PartId::kQkv].bias < 0, "replicated key/value heads with a qkv bias");
  const int64_t C = w_.C, hd = w_.head_dim, KVH = spec_.attention.kv_heads;
  const int64_t q_rows = w_.heads * hd, local = w_.qkv * C, all_kv = KVH * hd * C;
  float* mine = ws_.kv_grads;    // [qkv, C]: this micro-batch's gradient of the local rows
  float* shared = mine + local;  // [2 KVH hd, C]: k heads, then v heads
  std::fill(mine, mine + local, 0.0f);
  qkv_.backward_into(p, ws_.d_qkv, x, ws_.d_c, mine, N);
  std::fill(shared, shared + 2 * all_kv, 0.0f);
  const float* k_rows = mine + q_rows * C;
  const float* v_rows = k_rows + hd * C;
  std::copy(k_rows, k_rows + hd * C, shared + kv_head_ * hd * C);
  std::copy(v_rows, v_rows + hd * C, shared + all_kv + kv_head_ * hd * C);
  tp_group_->all_reduce(shared, 2 * all_kv);
  // Each sharing rank contributed its copy: the sum is the gradient of the one kv head.
  float* dw = p.grad(parts_[PartId::kQkv].weight);
  k::add(dw, mine, dw, q_rows * C);
  k::add(dw + q_rows * C, shared + kv_head_ * hd * C, dw + q_rows * C, hd * C);
  k::add(dw + (q_rows + hd) * C, shared + all_kv + kv_head_ * hd * C, dw + (q_rows + hd) * C,
         hd * C);
}

void Block::backward(const ParamAccess& p, const float* x, float* d_res, int64_t B, int64_t T,
                     Recompute recompute, float aux_scale) {
  const int64_t N = B * T, R = tp_.rows(N), C = w_.C;
  const AttentionGeometry& g = spec_.attention;
  if (recompute == Recompute::kFull) {
    forward(p, x, B, T);
  } else if (recompute == Recompute::kSelective || (format_.low && moe_ != nullptr)) {
    recompute_selected(p, x, N);
  }
  const bool sp = tp_.sequence_parallel();
  // The residual connection passes d_res through unchanged; each branch adds its part.
  const float* d_mlp_in;
  if (moe_ != nullptr) {
    const float* dy = tp_.gather(d_res, ws_.full.f32, N);
    const float* in = tp_.gather(a_.ln2.f32, ws_.partial, N);
    auto grad = [&](PartId id) {
      const int64_t o = parts_[id].weight;
      return o >= 0 ? p.grad(o) : nullptr;
    };
    const MoeGrads<float> grads{grad(PartId::kRouter), grad(PartId::kExpertsIn),
                                grad(PartId::kExpertsOut), grad(PartId::kSharedIn),
                                grad(PartId::kSharedOut)};
    moe_->backward(dy, in, ws_.d_c, N, moe_weights(p), grads, aux_scale);
    d_mlp_in = ws_.d_c + tp_.first_row(N) * C;
  } else {
    const float* dy = tp_.gather(d_res, ws_.full.f32, N);
    float* d_act = ws_.d_hidden;
    float* d_pre = spec_.activation == Activation::kGelu ? ws_.d_hidden : ws_.d_hidden + N * w_.ffn;
    fcproj_->backward(p, dy, a_.act, d_act, N);
    if (spec_.activation == Activation::kGelu) {
      k::gelu_backward(d_act, a_.fch, d_pre, N * w_.ffn);
    } else {
      k::swiglu_backward(d_act, a_.fch, d_pre, N, w_.ffn);
    }
    fc_->backward(p, d_pre, column_input(a_.ln2, N), ws_.d_c, N);
    float* completed = sp ? ws_.d_rows : ws_.d_c;
    tp_.complete(ws_.d_c, completed, N);
    d_mlp_in = completed;
  }
  ln2_.backward(p, d_mlp_in, a_.res_mid, a_.ln2_mean, a_.ln2_rstd, d_res, R);

  const float* dy = tp_.gather(d_res, ws_.full.f32, N);
  proj_.backward(p, dy, a_.atty, ws_.d_c, N);
  k::attention_backward(ws_.d_c, a_.qkv, a_.lse, ws_.d_qkv, ws_.attention_scratch, B, T, w_.heads,
                        w_.kv_heads, w_.head_dim);
  if (g.rope) {
    k::rope_backward(ws_.d_qkv, B, T, w_.heads, w_.kv_heads, w_.head_dim, 0, g.rope_theta);
  }
  qkv_backward(p, column_input(a_.ln1, N), N);
  float* completed = sp ? ws_.d_rows : ws_.d_c;
  tp_.complete(ws_.d_c, completed, N);
  ln1_.backward(p, completed, x, a_.ln1_mean, a_.ln1_rstd, d_res, R);
}

}  // namespace tessera::model
