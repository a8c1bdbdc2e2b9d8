#include "tessera/model/group_gradients.h"

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

void add_group_sum(const kernels::Context& ctx, Collectives& group, std::span<float> partial,
                   int64_t width, std::initializer_list<float*> grads) {
  int64_t pieces = 0;
  for (float* g : grads) {
    if (g == nullptr) break;
    ++pieces;
  }
  check(pieces * width <= int64_t(partial.size()),
        "add_group_sum: {} pieces of {} values do not fit {} partial values", pieces, width,
        partial.size());
  group.all_reduce(partial.data(), pieces * width);
  const float* piece = partial.data();
  for (float* g : grads) {
    if (g == nullptr) break;
    kernels::add(ctx, g, piece, g, width);
    piece += width;
  }
}

}  // namespace tessera::model
