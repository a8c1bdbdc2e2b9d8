#pragma once

#include <cstdint>

#include "tessera/model/execution.h"

namespace tessera::parallel {

// Model-state bytes per data-parallel rank.
struct ZeroBytes {
  double params = 0, grads = 0, optimizer = 0;
  double total() const { return params + grads + optimizer; }
};

// What ZeRO (Rajbhandari et al., 2020) predicts for `params` parameters over `ranks` with AdamW:
// stage 1 divides the optimizer state by the ranks, stage 2 the gradients too, stage 3 the
// parameters too. Per parameter: f32 training holds 4 bytes of parameters, 4 of gradients and 8
// of moments (16); bf16 holds 2 + 2 + 12, the f32 master weights counting as optimizer state
// (16); f16 keeps f32 gradients, which its loss scale would overflow in f16 (2 + 4 + 12). The
// trainer allocates exactly this, and the planner uses it.
ZeroBytes zero_model_state(int stage, model::Precision precision, double params, int64_t ranks);

}  // namespace tessera::parallel
