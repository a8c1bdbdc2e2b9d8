#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>

#include "tessera/kernels/context.h"
#include "tessera/model/collectives.h"

namespace tessera::model {

// A layer whose ranks each see only some rows or heads (a sequence-parallel norm, QK-norm over a
// rank's heads) computes partial gradients of its replicated gains and biases. Sums `partial`,
// pieces of `width` values in the order of `grads`, over `group` and adds each piece to its
// gradient; a null gradient (a norm without a bias) ends the pieces.
void add_group_sum(const kernels::Context& ctx, Collectives& group, std::span<float> partial,
                   int64_t width, std::initializer_list<float*> grads);

}  // namespace tessera::model
