#include "tessera/model/model_layout.h"

#include <fmt/format.h>

namespace tessera::model {

ModelLayout model_layout(const ModelConfig& c) {
  validate(c);
  ModelLayout m;
  ParameterLayout& p = m.params;
  const int64_t C = c.d_model, F = c.ffn();
  const bool gpt2 = c.arch == Architecture::kGpt2;
  m.wte = p.add("wte.weight", {c.vocab_size, C}, true);
  if (gpt2) m.wpe = p.add("wpe.weight", {c.max_seq, C}, true);
  // The head sits with the embeddings, below the blocks: the model uses both at each end of a
  // step, and backward finishes the blocks' gradients from the top of the buffer down.
  m.lnf_w = p.add("lnf.weight", {C}, false);
  if (gpt2) m.lnf_b = p.add("lnf.bias", {C}, false);
  m.lm_head = c.tie_embeddings ? m.wte : p.add("lm_head.weight", {c.vocab_size, C}, true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string b = fmt::format("blocks.{}.", l);
    BlockOffsets o;
    o.ln1_w = p.add(b + "ln1.weight", {C}, false);
    if (gpt2) o.ln1_b = p.add(b + "ln1.bias", {C}, false);
    o.qkv_w = p.add(b + "attn.qkv.weight", {c.qkv_width(), C}, true);
    if (gpt2) o.qkv_b = p.add(b + "attn.qkv.bias", {c.qkv_width()}, false);
    o.proj_w = p.add(b + "attn.proj.weight", {C, c.n_head * c.head_dim()}, true);
    if (gpt2) o.proj_b = p.add(b + "attn.proj.bias", {C}, false);
    if (!c.parallel_block) o.ln2_w = p.add(b + "ln2.weight", {C}, false);
    if (gpt2) {
      if (!c.parallel_block) o.ln2_b = p.add(b + "ln2.bias", {C}, false);
      o.fc_w = p.add(b + "fc.weight", {F, C}, true);
      o.fc_b = p.add(b + "fc.bias", {F}, false);
      o.fcproj_w = p.add(b + "fcproj.weight", {C, F}, true);
      o.fcproj_b = p.add(b + "fcproj.bias", {C}, false);
    } else if (!c.is_moe()) {
      o.fc_w = p.add(b + "mlp.gate_up.weight", {2 * F, C}, true);
      o.fcproj_w = p.add(b + "mlp.down.weight", {C, F}, true);
    } else {
      const int64_t E = c.moe.n_experts, SF = c.moe.n_shared * F;
      o.router_w = p.add(b + "moe.router.weight", {E, C}, true);
      o.experts_gate_up = p.add(b + "moe.experts.gate_up.weight", {E, 2 * F, C}, true);
      o.experts_down = p.add(b + "moe.experts.down.weight", {E, C, F}, true);
      if (SF > 0) {
        o.shared_gate_up = p.add(b + "moe.shared.gate_up.weight", {2 * SF, C}, true);
        o.shared_down = p.add(b + "moe.shared.down.weight", {C, SF}, true);
      }
    }
    m.blocks.push_back(o);
  }
  return m;
}

ParameterCount count_parameters(const ModelConfig& c) {
  const ModelLayout m = model_layout(c);
  ParameterCount n;
  for (const ParamInfo& p : m.params.entries()) n.total += p.shape.numel();
  n.active = n.total;
  if (c.is_moe()) {
    const int64_t per_expert = 3 * c.ffn() * c.d_model;
    n.active -= c.n_layer * (c.moe.n_experts - c.moe.top_k) * per_expert;
  }
  return n;
}

}  // namespace tessera::model
