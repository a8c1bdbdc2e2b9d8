#include "tessera/model/model_config_keys.h"

namespace tessera::model {

std::vector<ConfigKey> model_config_schema() {
  using T = ConfigType;
  return {
      {"model.arch", T::kString, "gpt2", false,
       "\"gpt2\" or \"llama\" (RMSNorm, RoPE, SwiGLU, GQA)"},
      {"model.vocab_size", T::kInt, "256", true, "token vocabulary size (256 = raw bytes)"},
      {"model.n_layer", T::kInt, "4", true, "number of transformer blocks"},
      {"model.n_head", T::kInt, "4", true, "attention heads per block; must divide d_model"},
      {"model.d_model", T::kInt, "256", true, "residual stream width"},
      {"model.max_seq", T::kInt, "256", true, "longest context (position table size)"},
      {"model.n_kv_head", T::kInt, "0", false, "key/value heads (llama); 0 = n_head"},
      {"model.ffn_hidden", T::kInt, "0", false,
       "MLP (and expert) width; 0 = 4 d_model (gpt2), 8/3 d_model rounded to 256 (llama)"},
      {"model.rope_theta", T::kFloat, "10000", false, "rotary embedding base (llama)"},
      {"model.head_dim", T::kInt, "0", false,
       "channels per attention head; 0 = d_model / n_head (others: planning only)"},
      {"model.parallel_block", T::kBool, "false", false,
       "PaLM's parallel attention and MLP (planning only)"},
      {"model.norm_eps", T::kFloat, "1e-5", false, "RMSNorm epsilon (llama; GPT-2 uses 1e-5)"},
      {"model.tie_embeddings", T::kBool, "true", false,
       "output projection shares the token embedding (always true for gpt2)"},
      {"model.moe_experts", T::kInt, "0", false, "routed experts per block (llama); 0 = dense"},
      {"model.moe_top_k", T::kInt, "2", false, "experts each token is routed to"},
      {"model.moe_shared_experts", T::kInt, "0", false, "experts every token passes through"},
      {"model.moe_capacity_factor", T::kFloat, "0", false,
       "expert capacity as a multiple of the even share; 0 = dropless"},
      {"model.moe_aux_loss_coef", T::kFloat, "0.01", false, "load-balancing loss weight"},
  };
}

ModelConfig model_config_from(const Config& config) {
  ModelConfig m;
  m.arch = architecture_from_name(config.get_string("model.arch"));
  m.vocab_size = config.get_int("model.vocab_size");
  m.n_layer = config.get_int("model.n_layer");
  m.n_head = config.get_int("model.n_head");
  m.d_model = config.get_int("model.d_model");
  m.max_seq = config.get_int("model.max_seq");
  m.n_kv_head = config.get_int("model.n_kv_head");
  m.ffn_hidden = config.get_int("model.ffn_hidden");
  m.rope_theta = config.get_float("model.rope_theta");
  m.head_dim_override = config.get_int("model.head_dim");
  m.parallel_block = config.get_bool("model.parallel_block");
  m.norm_eps = config.get_float("model.norm_eps");
  m.tie_embeddings = config.get_bool("model.tie_embeddings");
  m.moe.n_experts = config.get_int("model.moe_experts");
  m.moe.top_k = config.get_int("model.moe_top_k");
  m.moe.n_shared = config.get_int("model.moe_shared_experts");
  m.moe.capacity_factor = config.get_float("model.moe_capacity_factor");
  m.moe.aux_loss_coef = config.get_float("model.moe_aux_loss_coef");
  validate(m);
  return m;
}

}  // namespace tessera::model
