#include "tessera/model/block.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;
using Act = ActivationId;

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

int64_t floats_per_row(const Width& width, const BlockWidths& w) {
  return width.model * w.C + width.query * w.heads * w.head_dim +
         width.kv * w.kv_heads * w.head_dim + width.heads * w.heads + width.kv_heads * w.kv_heads +
         width.ffn * w.ffn + width.one;
}

namespace {

// GQA with tp above the kv heads: the rank's kv head is shared with tp / kv_heads other ranks.
std::optional<SharedHeads> shared_kv_heads(const BlockSpec& spec, const BlockWidths& w,
                                           const Sharding& s) {
  const int64_t kv = spec.attention.kv_heads;
  if (kv >= s.tp) return std::nullopt;
  return SharedHeads{w.heads * w.head_dim, w.head_dim, 2, s.tp_rank * kv / s.tp, kv};
}

// The MoE layer's weights or gradients: `at` of each offset (-1: none, null).
template <typename Pointers, typename At>
Pointers moe_pointers(const PartTable& parts, const AdapterTable& adapters, At at) {
  const AdapterOffsets &in = adapters[PartId::kExpertsIn], &out = adapters[PartId::kExpertsOut];
  return {at(parts[PartId::kRouter].weight),
          at(parts[PartId::kExpertsIn].weight),
          at(parts[PartId::kExpertsOut].weight),
          at(parts[PartId::kSharedIn].weight),
          at(parts[PartId::kSharedOut].weight),
          at(in.a),
          at(in.b),
          at(out.a),
          at(out.b)};
}

}  // namespace

Block::Block(const kernels::Context& ctx, const ModelSpec& spec, const ModelLayout& layout,
             int64_t layer, const ModelParallel& parallel, MatmulFormat format,
             const BlockWorkspace& workspace, const BlockActivations& activations,
             MoeLayer<float>* moe, int64_t max_context, const AdapterBank* served_adapters)
    : ctx_(ctx),
      w_(spec.block, layout.sharding),
      parts_(layout.blocks[layer]),
      expert_adapters_(layout.adapters.empty() ? AdapterTable{} : layout.adapters[layer]),
      tp_(parallel, spec.block.d_model),
      format_(format),
      ws_(workspace),
      a_(activations),
      ln1_(ctx, spec.block.norm, spec.block.norm_eps, w_.C, parts_[PartId::kAttentionNorm], format,
           tp_.sequence_parallel() ? parallel.tp : nullptr),
      ln2_(ctx, spec.block.norm, spec.block.norm_eps, w_.C, parts_[PartId::kMlpNorm], format,
           tp_.sequence_parallel() ? parallel.tp : nullptr),
      adapters_(ctx, layout, layer, parallel.tp, format,
                {ws_.lora_u, ws_.lora_du, ws_.lora_x, ws_.lora_dropout_key}, served_adapters),
      attention_(ctx, spec.block.attention, w_.C, w_.heads, w_.kv_heads, parts_, tp_, parallel.tp,
                 format, ws_.parallel, ws_.dy_low, ws_.int8_scratch,
                 shared_kv_heads(spec.block, w_, layout.sharding), ws_.attention_scratch,
                 ws_.decode_scratch, max_context, adapters_,
                 {parallel.sequence_split(), parallel.cp, ws_.sequences}),
      moe_(moe) {
  if (!spec.block.moe) {
    mlp_ = std::make_unique<Mlp>(ctx, spec.block.activation, w_.C, w_.ffn, parts_, tp_, parallel.tp,
                                 format, ws_.parallel, ws_.dy_low, ws_.int8_scratch, adapters_);
  }
}

void Block::bind(const BlockActivations& activations, MoeLayer<float>* moe) {
  a_ = activations;
  moe_ = moe;
}

MoeWeights<float> Block::moe_weights(const ParamAccess& p) const {
  return moe_pointers<MoeWeights<float>>(parts_, expert_adapters_,
                                         [&](int64_t o) { return o >= 0 ? p.f32(o) : nullptr; });
}

MoeGrads<float> Block::moe_grads(const ParamAccess& p) const {
  return moe_pointers<MoeGrads<float>>(parts_, expert_adapters_,
                                       [&](int64_t o) { return o >= 0 ? p.grad(o) : nullptr; });
}

// Every tensor-parallel rank runs the mixture of experts over all N tokens; with sequence
// parallelism it keeps its own rows of the result.
double Block::moe_forward(const ParamAccess& p, int64_t N) {
  const int64_t R = tp_.rows(N), C = w_.C;
  const bool sp = tp_.sequence_parallel();
  const float* in = tp_.gather(a_[Act::kMlpNormOutput].f32, ws_.parallel.partial, N);
  float* out = sp ? ws_.parallel.d_input : a_.res_out;
  const double aux = moe_->forward(in, out, N, moe_weights(p));
  if (sp) k::copy_on_device(ctx_, a_.res_out, out + tp_.first_row(N) * C, sizeof(float) * R * C);
  k::add(ctx_, a_[Act::kResidualMid].f32, a_.res_out, a_.res_out, R * C);
  return aux;
}

const float* Block::moe_backward(const ParamAccess& p, const float* d_res, int64_t N,
                                 float aux_scale) {
  const float* dy = tp_.gather(d_res, ws_.parallel.full.f32, N);
  const float* in = tp_.gather(a_[Act::kMlpNormOutput].f32, ws_.parallel.partial, N);
  moe_->backward(dy, in, ws_.parallel.d_input, N, moe_weights(p), moe_grads(p), aux_scale);
  return ws_.parallel.d_input + tp_.first_row(N) * w_.C;
}

double Block::forward(const ParamAccess& p, const float* x, int64_t B, int64_t T) {
  const int64_t N = B * T, R = tp_.rows(N);
  ln1_.forward(p, x, a_[Act::kAttentionNormOutput], a_[Act::kAttentionNormMean].f32,
               a_[Act::kAttentionNormRstd].f32, R);
  attention_.forward(p, a_[Act::kAttentionNormOutput], x, attention_activations(),
                     a_[Act::kResidualMid].f32, B, T);
  ln2_.forward(p, a_[Act::kResidualMid].f32, a_[Act::kMlpNormOutput], a_[Act::kMlpNormMean].f32,
               a_[Act::kMlpNormRstd].f32, R);
  if (moe_ != nullptr) return moe_forward(p, N);
  mlp_->forward(p, a_[Act::kMlpNormOutput], a_[Act::kResidualMid].f32, mlp_activations(),
                a_.res_out, N);
  return 0;
}

void Block::decode(const ParamAccess& p, const float* x, const k::PagedKv& kv,
                   std::span<const k::PagedChunk> chunks, int64_t N) {
  ln1_.forward(p, x, a_[Act::kAttentionNormOutput], a_[Act::kAttentionNormMean].f32,
               a_[Act::kAttentionNormRstd].f32, N);
  attention_.decode(p, a_[Act::kAttentionNormOutput], x, attention_activations(),
                    a_[Act::kResidualMid].f32, kv, chunks, N);
  ln2_.forward(p, a_[Act::kResidualMid].f32, a_[Act::kMlpNormOutput], a_[Act::kMlpNormMean].f32,
               a_[Act::kMlpNormRstd].f32, N);
  if (moe_ != nullptr) {
    moe_forward(p, N);
  } else {
    mlp_->forward(p, a_[Act::kMlpNormOutput], a_[Act::kResidualMid].f32, mlp_activations(),
                  a_.res_out, N);
  }
}

// Brings back what selective recomputation dropped: the norm outputs and the MLP activation.
// With MoE in low precision the router needs the f32 norm output, which is transient too.
void Block::recompute_selected(const ParamAccess& p, const float* x, int64_t N) {
  const int64_t R = tp_.rows(N);
  ln1_.forward(p, x, a_[Act::kAttentionNormOutput], a_[Act::kAttentionNormMean].f32,
               a_[Act::kAttentionNormRstd].f32, R);
  ln2_.forward(p, a_[Act::kResidualMid].f32, a_[Act::kMlpNormOutput], a_[Act::kMlpNormMean].f32,
               a_[Act::kMlpNormRstd].f32, R);
  if (mlp_) mlp_->recompute(mlp_activations(), N);
}

void Block::backward(const ParamAccess& p, const float* x, float* d_res, int64_t B, int64_t T,
                     Recompute recompute, float aux_scale, bool hold_weights) {
  const int64_t N = B * T, R = tp_.rows(N);
  if (recompute == Recompute::kFull) {
    forward(p, x, B, T);
  } else if (recompute == Recompute::kSelective || (format_.low && moe_ != nullptr)) {
    recompute_selected(p, x, N);
  }
  // The residual connection passes d_res through unchanged; each branch adds its part.
  const float* d_ln2 = moe_ != nullptr
                           ? moe_backward(p, d_res, N, aux_scale)
                           : mlp_->backward(p, d_res, a_[Act::kMlpNormOutput], mlp_activations(),
                                            ws_.d_hidden, N, hold_weights ? &a_.mlp_held : nullptr);
  ln2_.backward(p, d_ln2, a_[Act::kResidualMid].f32, a_[Act::kMlpNormMean].f32,
                a_[Act::kMlpNormRstd].f32, d_res, R);
  const float* d_ln1 = attention_.backward(p, d_res, a_[Act::kAttentionNormOutput],
                                           attention_activations(), ws_.parallel.d_input, ws_.d_qkv,
                                           B, T, hold_weights ? &a_.attention_held : nullptr);
  ln1_.backward(p, d_ln1, x, a_[Act::kAttentionNormMean].f32, a_[Act::kAttentionNormRstd].f32,
                d_res, R);
}

void Block::weight_backward(const ParamAccess& p, int64_t N) {
  attention_.weight_backward(p, a_.attention_held, N);
  if (mlp_) mlp_->weight_backward(p, a_.mlp_held, N);
}

}  // namespace tessera::model
