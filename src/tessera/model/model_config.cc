#include "tessera/model/model_config.h"

#include "tessera/core/error.h"
#include "tessera/model/model_config_keys.h"

namespace tessera::model {

int64_t ModelConfig::ffn() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (arch == Architecture::kGpt2) return 4 * d_model;
  // Llama's default: two thirds of 4 * d_model (SwiGLU has three matrices), rounded up to 256.
  const int64_t two_thirds = 8 * d_model / 3;
  return (two_thirds + 255) / 256 * 256;
}

void check_runnable(const ModelConfig& config) {
  check(!config.parallel_block,
        "model.parallel_block = true describes a model for `tessera plan`; the engine does not "
        "run parallel blocks yet");
  check(config.head_dim() * config.n_head == config.d_model,
        "model.head_dim = {} with {} heads does not match d_model {}: such shapes are for "
        "`tessera plan`; the engine runs head_dim = d_model / n_head",
        config.head_dim(), config.n_head, config.d_model);
}

void validate(const ModelConfig& config) {
  check_settings(model_settings(), config);
  check(config.head_dim_override > 0 || config.d_model % config.n_head == 0,
        "model.d_model ({}) must be divisible by model.n_head ({}), or model.head_dim set",
        config.d_model, config.n_head);
  check(config.n_head % config.kv_heads() == 0,
        "model.n_head ({}) must be a multiple of model.n_kv_head ({})", config.n_head,
        config.kv_heads());
  const MoeConfig& moe = config.moe;
  if (config.arch == Architecture::kGpt2) {
    check(config.kv_heads() == config.n_head,
          "model.n_kv_head applies to model.arch = \"llama\" only");
    check(moe.n_experts == 0, "model.moe_experts needs model.arch = \"llama\"");
    check(!config.qk_norm, "model.qk_norm needs model.arch = \"llama\"");
    check(config.rope_scaling.type == kernels::RopeScalingType::kNone,
          "model.rope_scaling needs model.arch = \"llama\"");
    check(config.norm_eps == 1e-5,
          "model.norm_eps applies to model.arch = \"llama\" only (GPT-2's "
          "LayerNorm uses 1e-5), got {}",
          config.norm_eps);
    return;
  }
  check(config.head_dim() % 2 == 0, "rotary embeddings need an even head dimension, got {}",
        config.head_dim());
  const kernels::RopeScaling& s = config.rope_scaling;
  check(s.type != kernels::RopeScalingType::kLlama3 || s.low_freq_factor < s.high_freq_factor,
        "model.rope_low_freq_factor ({}) must be below model.rope_high_freq_factor ({})",
        s.low_freq_factor, s.high_freq_factor);
  check(s.type != kernels::RopeScalingType::kYarn || s.beta_slow < s.beta_fast,
        "model.rope_yarn_beta_slow ({}) must be below model.rope_yarn_beta_fast ({})", s.beta_slow,
        s.beta_fast);
  if (moe.n_experts == 0) return;
  check(moe.top_k <= moe.n_experts,
        "model.moe_top_k must be in [1, model.moe_experts = {}], got {}", moe.n_experts, moe.top_k);
}

}  // namespace tessera::model
