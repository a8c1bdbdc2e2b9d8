#include "tessera/model/block_spec.h"

#include "tessera/core/error.h"

namespace tessera::model {

const Part& BlockSpec::part(PartId id) const {
  for (const Part& p : parts) {
    if (p.id == id) return p;
  }
  fail("the block has no part {}", int(id));
}

bool BlockSpec::has(PartId id) const {
  for (const Part& p : parts) {
    if (p.id == id) return true;
  }
  return false;
}

namespace {

Part norm(PartId id, std::string name, int64_t width, bool bias) {
  return {.id = id,
          .kind = PartKind::kNorm,
          .name = std::move(name),
          .in = width,
          .bias = bias,
          .init = Init::kOnes};
}

Part linear(PartId id, std::string name, int64_t in, int64_t out, bool bias, Role role,
            Init init = Init::kNormal) {
  return {.id = id,
          .kind = PartKind::kLinear,
          .name = std::move(name),
          .in = in,
          .out = out,
          .bias = bias,
          .role = role,
          .init = init};
}

}  // namespace

BlockSpec block_spec(const ModelConfig& c) {
  validate(c);
  const bool gpt2 = c.arch == Architecture::kGpt2;
  const int64_t C = c.d_model, F = c.ffn(), hd = c.head_dim();
  BlockSpec s;
  s.norm = gpt2 ? NormKind::kLayerNorm : NormKind::kRmsNorm;
  s.norm_eps = c.norm_eps;
  s.attention = {c.n_head, c.kv_heads(), hd, !gpt2, c.rope_theta};
  s.activation = gpt2 ? Activation::kGelu : Activation::kSwiglu;
  s.d_model = C;
  s.ffn = F;
  s.parts.push_back(norm(PartId::kAttentionNorm, "ln1", C, gpt2));
  Part qkv = linear(PartId::kQkv, "attn.qkv", C, c.qkv_width(), gpt2, Role::kColumn);
  qkv.out_parts = {c.n_head * hd, c.kv_heads() * hd, c.kv_heads() * hd};
  qkv.out_unit = hd;
  s.parts.push_back(qkv);
  s.parts.push_back(linear(PartId::kAttentionOut, "attn.proj", c.n_head * hd, C, gpt2, Role::kRow,
                           Init::kResidual));
  if (!c.parallel_block) s.parts.push_back(norm(PartId::kMlpNorm, "ln2", C, gpt2));
  if (!c.is_moe()) {
    Part in = linear(PartId::kMlpIn, gpt2 ? "fc" : "mlp.gate_up", C, c.mlp_hidden_width(), gpt2,
                     Role::kColumn);
    if (!gpt2) in.out_parts = {F, F};
    s.parts.push_back(in);
    s.parts.push_back(linear(PartId::kMlpOut, gpt2 ? "fcproj" : "mlp.down", F, C, gpt2, Role::kRow,
                             Init::kResidual));
    return s;
  }
  s.moe = c.moe;
  const int64_t E = c.moe.n_experts, SF = c.moe.n_shared * F;
  const double routed_share = double(c.moe.top_k) / double(E);
  // The router and the shared experts are replicated over tp: every tp rank runs the MoE layer
  // of its tokens in full (docs/distributed.md).
  s.parts.push_back(linear(PartId::kRouter, "moe.router", C, E, false, Role::kReplicated));
  Part experts_in =
      linear(PartId::kExpertsIn, "moe.experts.gate_up", C, 2 * F, false, Role::kExpert);
  experts_in.stack = E;
  experts_in.token_share = routed_share;
  s.parts.push_back(experts_in);
  Part experts_out =
      linear(PartId::kExpertsOut, "moe.experts.down", F, C, false, Role::kExpert, Init::kResidual);
  experts_out.stack = E;
  experts_out.token_share = routed_share;
  s.parts.push_back(experts_out);
  if (SF > 0) {
    s.parts.push_back(
        linear(PartId::kSharedIn, "moe.shared.gate_up", C, 2 * SF, false, Role::kReplicated));
    s.parts.push_back(linear(PartId::kSharedOut, "moe.shared.down", SF, C, false, Role::kReplicated,
                             Init::kResidual));
  }
  return s;
}

ModelSpec model_spec(const ModelConfig& c) {
  ModelSpec m;
  m.block = block_spec(c);
  m.n_layer = c.n_layer;
  m.vocab_size = c.vocab_size;
  m.tied_head = c.tie_embeddings;
  const bool gpt2 = c.arch == Architecture::kGpt2;
  const int64_t C = c.d_model;
  m.embedding.push_back({.id = PartId::kTokenEmbedding,
                         .kind = PartKind::kEmbedding,
                         .name = "wte",
                         .in = C,
                         .out = c.vocab_size,
                         .role = Role::kVocab});
  if (gpt2) {
    m.embedding.push_back({.id = PartId::kPositionEmbedding,
                           .kind = PartKind::kEmbedding,
                           .name = "wpe",
                           .in = C,
                           .out = c.max_seq});
  }
  // The head sits with the embeddings, below the blocks: the model uses both at each end of a
  // step, and backward finishes the blocks' gradients from the top of the buffer down.
  m.head.push_back(norm(PartId::kFinalNorm, "lnf", C, gpt2));
  if (!c.tie_embeddings) {
    m.head.push_back(linear(PartId::kHead, "lm_head", C, c.vocab_size, false, Role::kVocab));
  }
  return m;
}

MatmulWeights matmul_weights(const ModelSpec& spec) {
  auto matrix = [](const Part& p) { return double(p.stack * p.out * p.in); };
  MatmulWeights w;
  for (const Part& p : spec.block.parts) {
    if (p.kind == PartKind::kLinear) w.block += matrix(p) * p.token_share;
  }
  for (const Part& p : spec.head) {
    if (p.kind == PartKind::kLinear) w.head += matrix(p);
  }
  for (const Part& p : spec.embedding) {
    if (spec.tied_head && p.id == PartId::kTokenEmbedding) w.head += matrix(p);
  }
  return w;
}

}  // namespace tessera::model
