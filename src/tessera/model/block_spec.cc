#include "tessera/model/block_spec.h"

#include <algorithm>
#include <array>

#include "tessera/core/error.h"
#include "tessera/core/split_commas.h"

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

Part norm(PartId id, std::string name, int64_t width, bool bias, ExternalSlice names) {
  return {.id = id,
          .kind = PartKind::kNorm,
          .name = std::move(name),
          .in = width,
          .bias = bias,
          .init = Init::kOnes,
          .external = {std::move(names)}};
}

// A residual-stream norm before a matmul: its output (the matmul's input), which selective
// recomputation rebuilds, and its statistics (LayerNorm's mean and 1/std, RMSNorm's 1/rms).
Part residual_norm(PartId id, std::string name, const ModelConfig& c, ExternalSlice names,
                   std::array<ActivationId, 3> saved) {
  const bool layer_norm = c.arch == Architecture::kGpt2;
  Part p = norm(id, std::move(name), c.d_model, layer_norm, std::move(names));
  p.saves.push_back({saved[0], {.model = 1}, true, true, Recompute::kSelective});
  if (layer_norm) p.saves.push_back({saved[1], {.one = 1}, true});
  p.saves.push_back({saved[2], {.one = 1}, true});
  return p;
}

Part linear(PartId id, std::string name, int64_t in, int64_t out, bool bias, Role role,
            std::vector<ExternalSlice> names, Init init = Init::kNormal) {
  return {.id = id,
          .kind = PartKind::kLinear,
          .name = std::move(name),
          .in = in,
          .out = out,
          .bias = bias,
          .role = role,
          .init = init,
          .external = std::move(names)};
}

// The attention's parts: the fused qkv projection, QK-norm where the model has it, and the output
// projection.
void add_attention_parts(const ModelConfig& c, BlockSpec& s) {
  const bool gpt2 = c.arch == Architecture::kGpt2;
  const int64_t C = c.d_model, hd = c.head_dim();
  const int64_t q_rows = c.n_head * hd, kv_rows = c.kv_heads() * hd;
  // llama.cpp's qwen3 (a Llama with QK-norm) rotates halves as Tessera does; its llama rotates
  // interleaved pairs, so its q and k rows are permuted.
  const bool pairs = !c.qk_norm;
  Part qkv = linear(PartId::kQkv, "attn.qkv", C, c.qkv_width(), gpt2, Role::kColumn,
                    gpt2 ? std::vector<ExternalSlice>{{"attn.c_attn", "attn_qkv"}}
                         : std::vector<ExternalSlice>{
                               {"self_attn.q_proj", "attn_q", q_rows, pairs ? c.n_head : 0},
                               {"self_attn.k_proj", "attn_k", kv_rows, pairs ? c.kv_heads() : 0},
                               {"self_attn.v_proj", "attn_v", kv_rows}});
  qkv.out_parts = {q_rows, kv_rows, kv_rows};
  qkv.out_unit = hd;
  qkv.hf_transposed = gpt2;
  // Its output after RoPE, and the log-sum-exp of the attention over it.
  qkv.saves = {{ActivationId::kQkv, {.query = 1, .kv = 2}},
               {ActivationId::kAttentionLse, {.heads = 1}}};
  s.parts.push_back(qkv);
  if (c.qk_norm) {
    // A gain per channel of a head, one for every query head and one for every key head; each
    // tensor-parallel rank holds both. The query norm's saves are both norms' (one kernel).
    Part q_norm =
        norm(PartId::kQueryNorm, "attn.q_norm", hd, false, {"self_attn.q_norm", "attn_q_norm"});
    q_norm.rows_per_token = c.n_head;
    q_norm.saves = {{ActivationId::kQkNormInput, {.query = 1, .kv = 1}},
                    {ActivationId::kQkNormRstd, {.heads = 1, .kv_heads = 1}}};
    s.parts.push_back(q_norm);
    Part k_norm =
        norm(PartId::kKeyNorm, "attn.k_norm", hd, false, {"self_attn.k_norm", "attn_k_norm"});
    k_norm.rows_per_token = c.kv_heads();
    s.parts.push_back(k_norm);
  }
  Part proj = linear(PartId::kAttentionOut, "attn.proj", q_rows, C, gpt2, Role::kRow,
                     {{gpt2 ? "attn.c_proj" : "self_attn.o_proj", "attn_output"}}, Init::kResidual);
  proj.hf_transposed = gpt2;
  // Its input, and its output added to the residual stream.
  proj.saves = {{ActivationId::kAttentionOutput, {.query = 1}, false, true},
                {ActivationId::kResidualMid, {.model = 1}, true}};
  s.parts.push_back(proj);
}

void add_dense_mlp_parts(const ModelConfig& c, BlockSpec& s) {
  const bool gpt2 = c.arch == Architecture::kGpt2;
  const int64_t C = c.d_model, F = c.ffn();
  Part in = linear(PartId::kMlpIn, gpt2 ? "fc" : "mlp.gate_up", C, c.mlp_hidden_width(), gpt2,
                   Role::kColumn,
                   gpt2 ? std::vector<ExternalSlice>{{"mlp.c_fc", "ffn_up"}}
                        : std::vector<ExternalSlice>{{"mlp.gate_proj", "ffn_gate", F},
                                                     {"mlp.up_proj", "ffn_up", F}});
  if (!gpt2) in.out_parts = {F, F};
  in.hf_transposed = gpt2;
  in.saves = {{ActivationId::kMlpHidden, {.ffn = gpt2 ? 1 : 2}}};
  s.parts.push_back(in);
  Part out = linear(PartId::kMlpOut, gpt2 ? "fcproj" : "mlp.down", F, C, gpt2, Role::kRow,
                    {{gpt2 ? "mlp.c_proj" : "mlp.down_proj", "ffn_down"}}, Init::kResidual);
  out.hf_transposed = gpt2;
  // Its input, the activation's output, which selective recomputation rebuilds.
  out.saves = {{ActivationId::kMlpActivation, {.ffn = 1}, false, true, Recompute::kSelective}};
  s.parts.push_back(out);
}

void add_moe_parts(const ModelConfig& c, BlockSpec& s) {
  const int64_t C = c.d_model, F = c.ffn();
  s.moe = c.moe;
  const int64_t E = c.moe.n_experts, SF = c.moe.n_shared * F;
  const double routed_share = double(c.moe.top_k) / double(E);
  // The router and the shared experts are replicated over tp: every tp rank runs the MoE layer
  // of its tokens in full (docs/distributed.md). Hugging Face's Mixtral names each expert's
  // matrices; GGUF export writes dense models only.
  s.parts.push_back(linear(PartId::kRouter, "moe.router", C, E, false, Role::kReplicated,
                           {{"block_sparse_moe.gate"}}));
  Part experts_in = linear(
      PartId::kExpertsIn, "moe.experts.gate_up", C, 2 * F, false, Role::kExpert,
      {{"block_sparse_moe.experts.{e}.w1", "", F}, {"block_sparse_moe.experts.{e}.w3", "", F}});
  experts_in.stack = E;
  experts_in.token_share = routed_share;
  experts_in.out_parts = {F, F};
  s.parts.push_back(experts_in);
  Part experts_out = linear(PartId::kExpertsOut, "moe.experts.down", F, C, false, Role::kExpert,
                            {{"block_sparse_moe.experts.{e}.w2"}}, Init::kResidual);
  experts_out.stack = E;
  experts_out.token_share = routed_share;
  s.parts.push_back(experts_out);
  if (SF > 0) {
    // Mixtral has no shared experts: no Hugging Face name, and such a model is not exported.
    s.parts.push_back(
        linear(PartId::kSharedIn, "moe.shared.gate_up", C, 2 * SF, false, Role::kReplicated, {{}}));
    s.parts.push_back(linear(PartId::kSharedOut, "moe.shared.down", SF, C, false, Role::kReplicated,
                             {{}}, Init::kResidual));
  }
}

// A and B of the adapter of `base`. A column-parallel part's B is split like it (A is whole on
// every rank); a row-parallel part's A is split like it (B is whole on every rank). An expert
// stack's adapters are stacks of one adapter per expert, held with their experts.
void add_adapter_parts(const Part& base, int64_t rank, BlockSpec& s) {
  const bool column = base.role == Role::kColumn, experts = base.role == Role::kExpert;
  // A piece per module Hugging Face names (q, k and v; gate and up; GPT-2's fused c_attn is one).
  const int64_t pieces = int64_t(base.external.size());
  Part a = linear(base.id, base.name + ".lora_a", base.in, pieces * rank, false,
                  experts  ? Role::kExpert
                  : column ? Role::kReplicated
                           : Role::kRow,
                  base.external, Init::kLoraDown);
  Part b = linear(base.id, base.name + ".lora_b", rank, base.out, false,
                  experts  ? Role::kExpert
                  : column ? Role::kColumn
                           : Role::kReplicated,
                  base.external, Init::kZeros);
  for (Part* p : {&a, &b}) {
    p->stack = base.stack;
    p->token_share = base.token_share;
  }
  a.lora = LoraMatrix::kA;
  s.adapters.push_back(std::move(a));
  b.out_parts = base.out_parts;
  b.out_unit = base.out_unit;
  b.lora = LoraMatrix::kB;
  s.adapters.push_back(std::move(b));
}

}  // namespace

std::vector<PartId> lora_target_parts(const ModelConfig& c) {
  static constexpr std::pair<const char*, std::array<PartId, 2>> kNames[] = {
      {"qkv", {PartId::kQkv, PartId::kQkv}},
      {"attn_out", {PartId::kAttentionOut, PartId::kAttentionOut}},
      {"mlp_in", {PartId::kMlpIn, PartId::kMlpIn}},
      {"mlp_out", {PartId::kMlpOut, PartId::kMlpOut}},
      {"attention", {PartId::kQkv, PartId::kAttentionOut}},
      {"mlp", {PartId::kMlpIn, PartId::kMlpOut}},
      {"experts_in", {PartId::kExpertsIn, PartId::kExpertsIn}},
      {"experts_out", {PartId::kExpertsOut, PartId::kExpertsOut}},
      {"experts", {PartId::kExpertsIn, PartId::kExpertsOut}},
  };
  std::vector<PartId> named;
  for (const std::string& name : split_commas(c.lora.targets)) {
    const auto* it = std::find_if(std::begin(kNames), std::end(kNames),
                                  [&](const auto& n) { return name == n.first; });
    check(it != std::end(kNames),
          "train.lora_targets: \"{}\" is not a target; name qkv, attn_out, mlp_in, mlp_out, "
          "attention, mlp, experts_in, experts_out or experts, separated by commas",
          name);
    named.insert(named.end(), it->second.begin(), it->second.end());
  }
  const auto names = [&](PartId id) {
    return std::find(named.begin(), named.end(), id) != named.end();
  };
  check(!c.is_moe() || (!names(PartId::kMlpIn) && !names(PartId::kMlpOut)),
        "train.lora_targets: a mixture of experts has no dense MLP; target its experts (experts, "
        "experts_in, experts_out) or its attention (attention, qkv, attn_out)");
  const bool experts = names(PartId::kExpertsIn) || names(PartId::kExpertsOut);
  check(c.is_moe() || !experts,
        "train.lora_targets: the model has no experts (model.moe_experts is 0); target mlp");
  check(!experts || c.lora.dropout == 0,
        "train.lora_dropout: dropout on the experts' adapters is not supported yet; set it to 0 "
        "or target the attention alone");
  std::vector<PartId> parts;
  for (PartId id : {PartId::kQkv, PartId::kAttentionOut, PartId::kMlpIn, PartId::kMlpOut,
                    PartId::kExpertsIn, PartId::kExpertsOut}) {
    if (names(id)) parts.push_back(id);
  }
  return parts;
}

std::vector<int64_t> lora_piece_rows(const Part& b) {
  return b.external.size() > 1 ? b.out_parts : std::vector<int64_t>{b.out};
}

BlockSpec block_spec(const ModelConfig& c) {
  validate(c);
  const bool gpt2 = c.arch == Architecture::kGpt2;
  BlockSpec s;
  s.norm = gpt2 ? NormKind::kLayerNorm : NormKind::kRmsNorm;
  s.norm_eps = c.norm_eps;
  s.attention = {c.n_head, c.kv_heads(), c.head_dim(), !gpt2, c.rope(), c.norm_eps};
  s.activation = gpt2 ? Activation::kGelu : Activation::kSwiglu;
  s.d_model = c.d_model;
  s.ffn = c.ffn();
  s.parts.push_back(residual_norm(
      PartId::kAttentionNorm, "ln1", c, {gpt2 ? "ln_1" : "input_layernorm", "attn_norm"},
      {ActivationId::kAttentionNormOutput, ActivationId::kAttentionNormMean,
       ActivationId::kAttentionNormRstd}));
  add_attention_parts(c, s);
  if (!c.parallel_block) {
    s.parts.push_back(residual_norm(
        PartId::kMlpNorm, "ln2", c, {gpt2 ? "ln_2" : "post_attention_layernorm", "ffn_norm"},
        {ActivationId::kMlpNormOutput, ActivationId::kMlpNormMean, ActivationId::kMlpNormRstd}));
  }
  if (c.is_moe()) {
    add_moe_parts(c, s);
  } else {
    add_dense_mlp_parts(c, s);
  }
  if (c.lora.enabled()) {
    s.lora_rank = c.lora.rank;
    s.lora_scale = c.lora.scale();
    s.lora_dropout = c.lora.dropout;
    s.lora_quantize = c.lora.quantize;
    for (PartId id : lora_target_parts(c)) add_adapter_parts(s.part(id), c.lora.rank, s);
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
  m.hf_block_prefix = gpt2 ? "transformer.h.{}." : "model.layers.{}.";
  m.gguf_stores_tied_head = gpt2;
  m.gguf_arch = gpt2 ? "gpt2" : c.qk_norm ? "qwen3" : "llama";
  const int64_t C = c.d_model;
  m.embedding.push_back(
      {.id = PartId::kTokenEmbedding,
       .kind = PartKind::kEmbedding,
       .name = "wte",
       .in = C,
       .out = c.vocab_size,
       .role = Role::kVocab,
       .external = {{gpt2 ? "transformer.wte" : "model.embed_tokens", "token_embd"}}});
  if (gpt2) {
    m.embedding.push_back({.id = PartId::kPositionEmbedding,
                           .kind = PartKind::kEmbedding,
                           .name = "wpe",
                           .in = C,
                           .out = c.max_seq,
                           .external = {{"transformer.wpe", "position_embd"}}});
  }
  // The head sits with the embeddings, below the blocks: the model uses both at each end of a
  // step, and backward finishes the blocks' gradients from the top of the buffer down.
  m.head.push_back(norm(PartId::kFinalNorm, "lnf", C, gpt2,
                        {gpt2 ? "transformer.ln_f" : "model.norm", "output_norm"}));
  if (!c.tie_embeddings) {
    m.head.push_back(linear(PartId::kHead, "lm_head", C, c.vocab_size, false, Role::kVocab,
                            {{"lm_head", "output"}}));
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
  for (const Part& p : spec.block.adapters) {
    w.adapters += matrix(p) * p.token_share;
    if (p.lora == LoraMatrix::kA) w.adapters_down += matrix(p) * p.token_share;
  }
  return w;
}

}  // namespace tessera::model
