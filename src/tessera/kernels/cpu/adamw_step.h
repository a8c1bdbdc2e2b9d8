// One AdamW step of one parameter, as torch.optim.AdamW takes it (decoupled weight decay, then
// the Adam update): the arithmetic adamw_update and adamw_update_low share, so both give the same
// bits for the same inputs.
#pragma once

#include <cmath>

#include "tessera/kernels/ops.h"

namespace tessera::kernels {

template <typename T>
struct AdamWStep {
  T lr, b1, b2, eps, decay, bias1, bias2_sqrt;

  explicit AdamWStep(const AdamWParams& p)
      : lr(T(p.lr)),
        b1(T(p.beta1)),
        b2(T(p.beta2)),
        eps(T(p.eps)),
        decay(T(1.0 - p.lr * p.weight_decay)),
        bias1(T(1.0 / (1.0 - std::pow(p.beta1, double(p.step))))),
        bias2_sqrt(T(1.0 / std::sqrt(1.0 - std::pow(p.beta2, double(p.step))))) {}

  // Updates m and v in place and returns the new parameter.
  T apply(T param, T g, T& m, T& v) const {
    const T mi = b1 * m + (T(1) - b1) * g;
    const T vi = b2 * v + (T(1) - b2) * g * g;
    m = mi;
    v = vi;
    return param * decay - lr * (mi * bias1) / (std::sqrt(vi) * bias2_sqrt + eps);
  }
};

}  // namespace tessera::kernels
