#include "tessera/model/norm.h"

#include <algorithm>

#include "tessera/kernels/ops.h"
#include "tessera/model/group_gradients.h"

namespace tessera::model {

namespace k = kernels;

Norm::Norm(const kernels::Context& ctx, NormKind kind, double eps, int64_t C, PartOffsets params,
           MatmulFormat format, Collectives* partial_over)
    : ctx_(ctx),
      kind_(kind),
      eps_(float(eps)),
      C_(C),
      params_(params),
      format_(format),
      partial_over_(partial_over),
      partial_(partial_over != nullptr ? 2 * C : 0) {}

void Norm::forward(const ParamAccess& p, const float* x, const MatmulInput& y, float* mean,
                   float* rstd, int64_t N) const {
  if (kind_ == NormKind::kLayerNorm) {
    k::layernorm_forward(ctx_, x, p.f32(params_.weight), p.f32(params_.bias), y.f32, mean, rstd, N,
                         C_);
  } else {
    k::rmsnorm_forward(ctx_, x, p.f32(params_.weight), y.f32, rstd, N, C_, eps_);
  }
  format_.finish(ctx_, y, N * C_);
}

void Norm::backward(const ParamAccess& p, const float* dy, const float* x, const float* mean,
                    const float* rstd, float* dx, int64_t N) {
  const bool layer = kind_ == NormKind::kLayerNorm;
  float* dgamma = p.grad(params_.weight);
  float* dbeta = layer ? p.grad(params_.bias) : nullptr;
  const bool frozen = dgamma == nullptr;
  if (partial_over_ != nullptr && !frozen) {
    std::fill(partial_.begin(), partial_.end(), 0.0f);
    dgamma = partial_.data();
    dbeta = layer ? partial_.data() + C_ : nullptr;
  }
  if (layer) {
    k::layernorm_backward(ctx_, dy, x, p.f32(params_.weight), mean, rstd, dx, dgamma, dbeta, N, C_);
  } else {
    k::rmsnorm_backward(ctx_, dy, x, p.f32(params_.weight), rstd, dx, dgamma, N, C_);
  }
  if (partial_over_ == nullptr || frozen) return;
  add_group_sum(ctx_, *partial_over_, partial_, C_,
                {p.grad(params_.weight), layer ? p.grad(params_.bias) : nullptr});
}

}  // namespace tessera::model
