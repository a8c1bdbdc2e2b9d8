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
  FlopsPerToken f;
  f.model = 6 * (blocks + w.head) + 3 * attention_forward;
  f.hardware = f.model;
  if (recompute == Recompute::kFull) f.hardware += 2 * blocks + attention_forward;
  if (recompute == Recompute::kSelective) f.hardware += attention_forward;
  return f;
}

}  // namespace tessera::model
