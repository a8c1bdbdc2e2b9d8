#pragma once

#include <cstdint>
#include <vector>

#include "tessera/model/model_config.h"
#include "tessera/model/parameters.h"

namespace tessera::model {

// Offsets of one block's parameters in the flat buffer (the same offsets index the gradients);
// -1 marks a parameter the architecture does not have.
struct BlockOffsets {
  int64_t ln1_w = -1, ln1_b = -1;    // attention norm (LayerNorm or RMSNorm)
  int64_t qkv_w = -1, qkv_b = -1;    // fused q, k, v projection [qkv_width, d_model]
  int64_t proj_w = -1, proj_b = -1;  // attention output [d_model, d_model]
  int64_t ln2_w = -1, ln2_b = -1;    // MLP norm
  // Dense MLP. GPT-2: fc [4C, C] then GELU then fcproj [C, 4C]. Llama: gate_up [2F, C] (gate
  // rows, then up rows) then SwiGLU then down [C, F].
  int64_t fc_w = -1, fc_b = -1, fcproj_w = -1, fcproj_b = -1;
  // Mixture of experts: router [E, C], experts' gate_up [E, 2F, C] and down [E, C, F], the
  // merged shared experts' gate_up [2SF, C] and down [C, SF].
  int64_t router_w = -1, experts_gate_up = -1, experts_down = -1, shared_gate_up = -1,
          shared_down = -1;
};

struct ModelLayout {
  ParameterLayout params;
  std::vector<BlockOffsets> blocks;
  int64_t wte = 0;   // token embedding [V, C]
  int64_t wpe = -1;  // GPT-2's learned positions [max_seq, C]
  int64_t lnf_w = 0, lnf_b = -1;
  int64_t lm_head = 0;  // [V, C]; equals wte when the embeddings are tied
};

// The one definition of every parameter's name, shape and place. Names:
//   wte.weight, wpe.weight (GPT-2), lnf.weight, lnf.bias (GPT-2), lm_head.weight (untied), and
//   per block "blocks.{l}.": ln1.*, attn.qkv.*, attn.proj.*, ln2.*, then GPT-2 fc.*, fcproj.*;
//   Llama mlp.gate_up.weight, mlp.down.weight; MoE moe.router.weight,
//   moe.experts.gate_up.weight, moe.experts.down.weight, moe.shared.gate_up.weight,
//   moe.shared.down.weight.
ModelLayout model_layout(const ModelConfig& config);

// Parameter count; the tied embedding counts once. With MoE, active counts top_k routed experts
// per token instead of all of them.
struct ParameterCount {
  int64_t total = 0;
  int64_t active = 0;
};
ParameterCount count_parameters(const ModelConfig& config);

}  // namespace tessera::model
