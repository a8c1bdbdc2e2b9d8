// Launch shapes and reductions shared by the CUDA kernel files. Grids are capped and every kernel
// strides over what its grid does not cover, so any size launches, and how work splits into
// blocks depends only on the sizes. Reductions use no atomics: a warp combines its lanes in a
// butterfly of fixed shuffle offsets 16, 8, 4, 2, 1, and a block combines its warps' results in
// warp order the same way, so results repeat bit for bit across runs and devices, and since the
// operations commute every lane ends with the same bits (branches on them never diverge).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace tessera::kernels::cuda::launch {

inline constexpr int kWarpSize = 32;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A capped grid of one-dimensional blocks of per_block work items (threads, or warps).
class GridCap {
 public:
  constexpr GridCap(int64_t per_block, int64_t max_blocks)
      : per_block_(per_block), max_blocks_(max_blocks) {}

  int64_t max_blocks() const { return max_blocks_; }
  // A block for each row.
  unsigned per_row(int64_t rows) const { return unsigned(std::min(rows, max_blocks_)); }
  // A work item for each of n elements.
  unsigned flat(int64_t n) const { return per_row(ceil_div(n, per_block_)); }
  // Columns on x, a work item each, and rows on y: one long row and many short ones both fill
  // the device, with at most max_blocks blocks in all.
  dim3 row_grid(int64_t rows, int64_t columns) const {
    const int64_t x = std::min(ceil_div(columns, per_block_), max_blocks_);
    const int64_t y = std::min(rows, std::max<int64_t>(1, max_blocks_ / x));
    return dim3(unsigned(x), unsigned(y));
  }

 private:
  int64_t per_block_;
  int64_t max_blocks_;
};

// Column sums of M rows in two passes: a kColumnTile x kTileRows block adds kColumnTile columns
// of one row block into per-column partials (a warp reads 32 adjacent floats of a row), then one
// thread per column adds the row blocks' partials in order.
inline constexpr int kColumnTile = 32;
inline constexpr int kTileRows = 8;

struct ColumnSumGrid {
  int64_t row_blocks;
  int64_t rows_per_block;
  dim3 grid;  // column tiles on x, row blocks on y
};

// Row blocks of at least 64 rows and at most 128 of them, or max_row_blocks (at least 1) if
// fewer fit in the partials' buffer: enough blocks to fill the device while the second pass
// stays short.
inline ColumnSumGrid column_sum_grid(int64_t M, int64_t N, int64_t max_row_blocks,
                                     int64_t max_blocks) {
  constexpr int64_t kMinRowsPerBlock = 64;
  constexpr int64_t kMaxRowBlocks = 128;
  const int64_t row_blocks = std::clamp(ceil_div(M, kMinRowsPerBlock), int64_t(1),
                                        std::min(kMaxRowBlocks, max_row_blocks));
  const int64_t column_tiles =
      std::min(ceil_div(N, kColumnTile), std::max<int64_t>(1, max_blocks / row_blocks));
  return {row_blocks, ceil_div(M, row_blocks), dim3(unsigned(column_tiles), unsigned(row_blocks))};
}

// Calls launch(std::integral_constant<int, kPerLane>) with the fewest channels per lane (1 to 8)
// that hold hd channels over a warp; hd is at most 8 * kWarpSize, which the caller checks.
template <typename Launch>
void with_channels_per_lane(int64_t hd, Launch&& launch) {
  switch (ceil_div(hd, kWarpSize)) {
    case 1:
      return launch(std::integral_constant<int, 1>{});
    case 2:
      return launch(std::integral_constant<int, 2>{});
    case 3:
      return launch(std::integral_constant<int, 3>{});
    case 4:
      return launch(std::integral_constant<int, 4>{});
    case 5:
      return launch(std::integral_constant<int, 5>{});
    case 6:
      return launch(std::integral_constant<int, 6>{});
    case 7:
      return launch(std::integral_constant<int, 7>{});
    default:
      return launch(std::integral_constant<int, 8>{});
  }
}

// This thread's index along x of the grid, and the stride of a loop over the grid's x threads.
__device__ __forceinline__ int64_t first_index() {
  return int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t grid_stride() { return int64_t(gridDim.x) * blockDim.x; }

__device__ __forceinline__ int lane_id() { return int(threadIdx.x) % kWarpSize; }

// This warp's index in a grid of kWarpsPerBlock-warp blocks, and the stride of a loop over them.
template <int kWarpsPerBlock>
__device__ __forceinline__ int64_t first_warp() {
  return int64_t(blockIdx.x) * kWarpsPerBlock + int64_t(threadIdx.x) / kWarpSize;
}
template <int kWarpsPerBlock>
__device__ __forceinline__ int64_t warp_stride() {
  return int64_t(gridDim.x) * kWarpsPerBlock;
}

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Every lane of the warp gets op over the 32 lanes' x.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T x, Op op) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

template <typename T>
__device__ __forceinline__ T warp_sum(T x) {
  return warp_reduce(x, Sum{});
}

// Every thread of a block of exactly kThreads threads gets op over the block's x; identity fills
// the lanes past the block's warps. The closing barrier lets the next call reuse the shared
// slots, and orders each thread's reads before the call ahead of any thread's writes after it.
template <int kThreads, typename T, typename Op>
__device__ __forceinline__ T block_reduce(T x, Op op, T identity) {
  constexpr unsigned kWarps = kThreads / kWarpSize;
  static_assert(kThreads % kWarpSize == 0 && kWarps <= kWarpSize);
  __shared__ T warp_results[kWarps];
  x = warp_reduce(x, op);
  if (threadIdx.x % kWarpSize == 0) warp_results[threadIdx.x / kWarpSize] = x;
  __syncthreads();
  x = threadIdx.x % kWarpSize < kWarps ? warp_results[threadIdx.x % kWarpSize] : identity;
  x = warp_reduce(x, op);
  __syncthreads();
  return x;
}

template <int kThreads, typename T>
__device__ __forceinline__ T block_sum(T x) {
  return block_reduce<kThreads>(x, Sum{}, T(0));
}

template <int kThreads>
__device__ __forceinline__ float block_max(float x) {
  return block_reduce<kThreads>(x, Max{}, -INFINITY);
}

}  // namespace tessera::kernels::cuda::launch
