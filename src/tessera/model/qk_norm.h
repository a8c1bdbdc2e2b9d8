#pragma once

#include <cstdint>
#include <vector>

#include "tessera/kernels/context.h"
#include "tessera/model/collectives.h"
#include "tessera/model/layer.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// QK-norm (Qwen 3): RMSNorm of each of this rank's query and key heads over its channels, in
// place in the qkv rows before RoPE, by a gain shared by all query heads and one shared by all
// key heads. Each tensor-parallel rank holds both gains but only its own heads, so its gains'
// gradients are partial: `partial_over` (the tensor-parallel group, or null on one rank) sums
// each backward's before it is added.
class QkNorm {
 public:
  QkNorm(const kernels::Context& ctx, double eps, int64_t heads, int64_t kv_heads, int64_t head_dim,
         PartOffsets query, PartOffsets key, Collectives* partial_over);

  // x [N, (heads + kv_heads) * head_dim] and rstd [N, heads + kv_heads] keep the input and the
  // statistics for backward; both null when decoding.
  void forward(const ParamAccess& p, float* qkv, float* x, float* rstd, int64_t N) const;
  // In place on d_qkv: the gradient of the normed q and k becomes that of their input.
  void backward(const ParamAccess& p, float* d_qkv, const float* x, const float* rstd, int64_t N);

 private:
  const kernels::Context& ctx_;
  float eps_;
  int64_t heads_, kv_heads_, head_dim_;
  PartOffsets query_, key_;
  Collectives* partial_over_;
  std::vector<float> partial_;  // [2 head_dim]: this backward's gains' gradients, before the sum
};

}  // namespace tessera::model
