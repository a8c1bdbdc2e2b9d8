#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"
#include "tessera/model/collectives.h"

namespace tessera::model {

// Rows of a column-parallel weight that several tensor-parallel ranks hold alike (a key and a
// value head shared by tp / kv_heads ranks): `segments` segments of `head_rows` rows, the first at
// local row `first_row`, each this rank's copy of head `head` of `total_heads`. Their weight
// gradients are partial on each rank and are summed over the ranks that share them.
struct SharedHeads {
  int64_t first_row = 0, head_rows = 0, segments = 0, head = 0, total_heads = 0;

  // Floats of add_shared_gradient's scratch `summed` for rows of `width` values.
  int64_t summed_floats(int64_t width) const { return segments * total_heads * head_rows * width; }
};

// grad [rows, width] += mine, this rank's gradient of its local rows, with each shared row's
// gradient summed over the ranks that share it: the shared rows of every rank meet in `summed`,
// a buffer of all the heads, are summed over tp, and each rank adds its own head's sum.
void add_shared_gradient(const kernels::Context& ctx, Collectives& tp, const SharedHeads& s,
                         const float* mine, float* summed, float* grad, int64_t rows,
                         int64_t width);

}  // namespace tessera::model
