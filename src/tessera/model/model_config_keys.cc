#include "tessera/model/model_config_keys.h"

namespace tessera::model {

const Settings<ModelConfig>& model_settings() {
  using M = ModelConfig;
  static const Settings<ModelConfig> rows = join<ModelConfig>({
      {
          setting("model.arch", &M::arch, "the architecture; llama: RMSNorm, RoPE, SwiGLU, GQA"),
          required(setting("model.vocab_size", &M::vocab_size,
                           "token vocabulary size (256 = raw bytes)", at_least(1))),
          required(
              setting("model.n_layer", &M::n_layer, "number of transformer blocks", at_least(1))),
          required(setting("model.n_head", &M::n_head,
                           "attention heads per block; must divide d_model", at_least(1))),
          required(setting("model.d_model", &M::d_model, "residual stream width", at_least(1))),
          required(setting("model.max_seq", &M::max_seq, "longest context (position table size)",
                           at_least(1))),
          setting("model.n_kv_head", &M::n_kv_head, "key/value heads (llama); 0 = n_head",
                  at_least(0)),
          setting("model.ffn_hidden", &M::ffn_hidden,
                  "MLP (and expert) width; 0 = 4 d_model (gpt2), 8/3 d_model rounded to 256 "
                  "(llama)",
                  at_least(0)),
          setting("model.rope_theta", &M::rope_theta, "rotary embedding base (llama)", above(0)),
          setting("model.head_dim", &M::head_dim_override,
                  "channels per attention head; 0 = d_model / n_head (others: planning only)",
                  at_least(0)),
          setting("model.parallel_block", &M::parallel_block,
                  "PaLM's parallel attention and MLP (planning only)"),
          setting("model.norm_eps", &M::norm_eps, "RMSNorm epsilon (llama; GPT-2 uses 1e-5)",
                  above(0)),
          setting("model.qk_norm", &M::qk_norm,
                  "RMSNorm of each query and key head before RoPE, as Qwen 3 (llama)"),
          setting("model.tie_embeddings", &M::tie_embeddings,
                  "output projection shares the token embedding"),
      },
      nest(&M::rope_scaling,
           Settings<kernels::RopeScaling>{
               setting("model.rope_scaling", &kernels::RopeScaling::type,
                       "rotary frequencies stretched past the trained context, as Hugging "
                       "Face's rope_scaling (llama): none, linear, llama3 or yarn"),
               setting("model.rope_scaling_factor", &kernels::RopeScaling::factor,
                       "how many times the trained context the scaling stretches to", at_least(1)),
               setting("model.rope_low_freq_factor", &kernels::RopeScaling::low_freq_factor,
                       "llama3 scaling: wavelengths past original_max_seq / this are stretched",
                       above(0)),
               setting("model.rope_high_freq_factor", &kernels::RopeScaling::high_freq_factor,
                       "llama3 scaling: wavelengths under original_max_seq / this are kept",
                       above(0)),
               setting("model.rope_original_max_seq", &kernels::RopeScaling::original_context,
                       "the context the model was trained at before its rope scaling", at_least(1)),
               setting("model.rope_yarn_beta_fast", &kernels::RopeScaling::beta_fast,
                       "yarn scaling: pairs turning more often than this within the original "
                       "context are kept",
                       above(0)),
               setting("model.rope_yarn_beta_slow", &kernels::RopeScaling::beta_slow,
                       "yarn scaling: pairs turning less often than this are stretched", above(0)),
               setting("model.rope_attention_factor", &kernels::RopeScaling::attention_factor,
                       "yarn scaling: what cos and sin are multiplied by; 0 = 0.1 ln(factor) + 1",
                       at_least(0)),
           }),
      nest(
          &M::moe,
          Settings<MoeConfig>{
              setting("model.moe_experts", &MoeConfig::n_experts,
                      "routed experts per block (llama); 0 = dense", at_least(0)),
              setting("model.moe_top_k", &MoeConfig::top_k, "experts each token is routed to",
                      at_least(1)),
              setting("model.moe_shared_experts", &MoeConfig::n_shared,
                      "experts every token passes through", at_least(0)),
              setting("model.moe_capacity_factor", &MoeConfig::capacity_factor,
                      "expert capacity as a multiple of the even share; 0 = dropless", at_least(0)),
              setting("model.moe_aux_loss_coef", &MoeConfig::aux_loss_coef,
                      "load-balancing loss weight", at_least(0)),
          }),
  });
  return rows;
}

const Settings<LoraConfig>& lora_settings() {
  using L = LoraConfig;
  static const Settings<LoraConfig> rows = {
      setting("train.lora_rank", &L::rank,
              "LoRA: the rank of the adapters trained on a frozen model; 0 trains every weight",
              at_least(0)),
      setting("train.lora_alpha", &L::alpha,
              "LoRA: each adapter's update is scaled by lora_alpha / lora_rank", above(0)),
      setting("train.lora_targets", &L::targets,
              "LoRA: the linears adapted, comma-separated: qkv, attn_out, mlp_in, mlp_out, "
              "attention (= qkv,attn_out), mlp (= mlp_in,mlp_out), and a mixture's experts_in, "
              "experts_out, experts (= both)"),
      setting("train.lora_dropout", &L::dropout,
              "LoRA: the probability that training zeroes an adapter's input value (PEFT's "
              "lora_dropout)",
              Range{0.0, 1.0, false, true}),
      setting("train.lora_quantize", &L::quantize,
              "LoRA: how the frozen model's block matrices are held: none (as train.precision "
              "says) or q8_0 (GGUF's 8-bit blocks, 1.06 bytes a weight)"),
  };
  return rows;
}

std::vector<ConfigKey> model_config_schema() { return config_schema(model_settings()); }

ModelConfig model_config_from(const Config& config) {
  ModelConfig m;
  read_settings(model_settings(), config, m);
  validate(m);
  return m;
}

}  // namespace tessera::model
