#include "tessera/model/shared_heads.h"

#include <algorithm>

#include "tessera/kernels/ops.h"

namespace tessera::model {

void add_shared_gradient(const kernels::Context& ctx, Collectives& tp, const SharedHeads& s,
                         const float* mine, float* summed, float* grad, int64_t rows,
                         int64_t width) {
  const int64_t head = s.head_rows * width, all_heads = s.total_heads * head;
  std::fill(summed, summed + s.segments * all_heads, 0.0f);
  for (int64_t j = 0; j < s.segments; ++j) {
    const float* from = mine + (s.first_row + j * s.head_rows) * width;
    std::copy(from, from + head, summed + j * all_heads + s.head * head);
  }
  tp.all_reduce(summed, s.segments * all_heads);
  const int64_t own = s.first_row * width;  // the rows before the shared ones are this rank's alone
  kernels::add(ctx, grad, mine, grad, own);
  for (int64_t j = 0; j < s.segments; ++j) {
    float* to = grad + (s.first_row + j * s.head_rows) * width;
    kernels::add(ctx, to, summed + j * all_heads + s.head * head, to, head);
  }
  const int64_t after = (s.first_row + s.segments * s.head_rows) * width;
  kernels::add(ctx, grad + after, mine + after, grad + after, rows * width - after);
}

}  // namespace tessera::model
