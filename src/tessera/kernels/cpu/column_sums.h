#pragma once

#include <algorithm>
#include <cstdint>

namespace tessera::kernels {

// Calls body(j0, j1) over blocks of columns in parallel; each block is owned by one thread and
// walks all rows in order, which keeps column reductions independent of the thread count.
template <typename Body>
void for_column_blocks(int64_t columns, Body body) {
  constexpr int64_t kBlock = 64;
  int64_t blocks = (columns + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    body(blk * kBlock, std::min(columns, (blk + 1) * kBlock));
  }
}

}  // namespace tessera::kernels
