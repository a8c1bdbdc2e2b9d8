// Tiny GPT-2, Llama (grouped-query attention, untied) and Llama-MoE shapes that model tests run
// in milliseconds.
#pragma once

#include <cstdint>

#include "tessera/model/model_config.h"

namespace tessera::model {

struct SmallConfigs {
  ModelConfig gpt2, llama, moe;
};

inline SmallConfigs small_configs(int64_t max_seq) {
  SmallConfigs s;
  s.gpt2.vocab_size = 29;
  s.gpt2.n_layer = 2;
  s.gpt2.n_head = 2;
  s.gpt2.d_model = 16;
  s.gpt2.max_seq = max_seq;
  s.llama = s.gpt2;
  s.llama.arch = Architecture::kLlama;
  s.llama.n_head = 4;
  s.llama.n_kv_head = 2;
  s.llama.ffn_hidden = 24;
  s.llama.tie_embeddings = false;
  s.moe = s.llama;
  s.moe.moe.n_experts = 3;
  s.moe.moe.top_k = 2;
  return s;
}

}  // namespace tessera::model
