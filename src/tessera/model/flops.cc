#include "tessera/model/flops.h"

namespace tessera::model {

FlopsPerToken flops_per_token(const ModelConfig& c, int64_t seq_len, Recompute recompute) {
  return flops_per_token(c, matmul_weights(model_spec(c)), seq_len, recompute);
}

FlopsPerToken flops_per_token(const ModelConfig& c, const MatmulWeights& w, int64_t seq_len,
                              Recompute recompute) {
  const double blocks = w.block * double(c.n_layer);
  const double attention_width = double(c.n_head * c.head_dim());
  const double attention_forward = 4.0 * double(c.n_layer) * double(seq_len) * attention_width;
  // A LoRA run multiplies by the frozen weights forward and for its input gradients, never for
  // theirs, and trains its adapters in full; backward computes each adapter's down-projection
  // again.
  const double adapters = w.adapters * double(c.n_layer);
  const double per_frozen_weight = c.lora.enabled() ? 4 : 6;
  FlopsPerToken f;
  f.model = per_frozen_weight * (blocks + w.head) + 6 * adapters + 3 * attention_forward;
  f.hardware = f.model + 2 * w.adapters_down * double(c.n_layer);
  if (recompute == Recompute::kFull) f.hardware += 2 * (blocks + adapters) + attention_forward;
  if (recompute == Recompute::kSelective) f.hardware += attention_forward;
  return f;
}

}  // namespace tessera::model
