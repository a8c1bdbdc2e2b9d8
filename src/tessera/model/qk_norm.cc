#include "tessera/model/qk_norm.h"

#include <algorithm>

#include "tessera/kernels/ops.h"
#include "tessera/model/group_gradients.h"

namespace tessera::model {

namespace k = kernels;

QkNorm::QkNorm(const kernels::Context& ctx, double eps, int64_t heads, int64_t kv_heads,
               int64_t head_dim, PartOffsets query, PartOffsets key, Collectives* partial_over)
    : ctx_(ctx),
      eps_(float(eps)),
      heads_(heads),
      kv_heads_(kv_heads),
      head_dim_(head_dim),
      query_(query),
      key_(key),
      partial_over_(partial_over),
      partial_(partial_over != nullptr ? 2 * head_dim : 0) {}

void QkNorm::forward(const ParamAccess& p, float* qkv, float* x, float* rstd, int64_t N) const {
  k::head_rmsnorm_forward(ctx_, qkv, p.f32(query_.weight), p.f32(key_.weight), x, rstd, N, heads_,
                          kv_heads_, head_dim_, eps_);
}

void QkNorm::backward(const ParamAccess& p, float* d_qkv, const float* x, const float* rstd,
                      int64_t N) {
  float* dq = p.grad(query_.weight);
  float* dk = p.grad(key_.weight);
  const bool frozen = dq == nullptr;
  if (partial_over_ != nullptr && !frozen) {
    std::fill(partial_.begin(), partial_.end(), 0.0f);
    dq = partial_.data();
    dk = partial_.data() + head_dim_;
  }
  k::head_rmsnorm_backward(ctx_, d_qkv, x, p.f32(query_.weight), p.f32(key_.weight), rstd, dq, dk,
                           N, heads_, kv_heads_, head_dim_);
  if (partial_over_ == nullptr || frozen) return;
  add_group_sum(ctx_, *partial_over_, partial_, head_dim_,
                {p.grad(query_.weight), p.grad(key_.weight)});
}

}  // namespace tessera::model
