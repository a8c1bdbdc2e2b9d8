#include "tessera/model/activation_memory.h"

#include "tessera/model/moe_layer.h"

namespace tessera::model {

int64_t saved_activation_bytes_per_layer(const ModelConfig& c, int64_t tokens, Precision p,
                                         Recompute r) {
  const int64_t C = c.d_model, H = c.n_head, HD = H * c.head_dim(), F = c.ffn();
  const bool gpt2 = c.arch == Architecture::kGpt2, moe = c.is_moe();
  // The block's output, which is the next block's input, is always kept.
  int64_t f32_values = C;
  int64_t matmul_inputs = 0;  // values stored in the precision of the matmuls
  if (r != Recompute::kFull) {
    const int64_t norm_stats = gpt2 ? 4 : 2;  // LayerNorm: mean and 1/std; RMSNorm: 1/rms
    const int64_t mlp_pre = moe ? 0 : c.mlp_hidden_width();
    f32_values += norm_stats + c.qkv_width() + H + C + mlp_pre;         // qkv, lse, mid residual
    matmul_inputs += HD;                                                // attention output
    if (r == Recompute::kNone) matmul_inputs += 2 * C + (moe ? 0 : F);  // norm outputs, act
  }
  const int64_t matmul_bytes = p == Precision::kF32 ? 4 : 2;
  int64_t bytes = tokens * (4 * f32_values + matmul_bytes * matmul_inputs);
  if (moe && r != Recompute::kFull) bytes += 4 * MoeLayer<float>::activation_floats(c, tokens);
  return bytes;
}

}  // namespace tessera::model
