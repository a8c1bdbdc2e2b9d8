// What the 4-bit linear kernels (q4_linear.cc for Q4_0, q4k_linear.cc for Q4_K) share: the
// repacked nibbles of a 32-column block of a group of 16 rows (four 64-byte chunks whose byte
// 4l + i holds row l's column 8c + i in its low nibble and column 8c + 4 + i in its high one),
// the activations' quantisation to int8, and how the work is cut into tiles over the threads.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tessera/kernels/cpu/q4_lanes.h"
#include "tessera/kernels/q4_linear.h"

namespace tessera::kernels::q4 {

inline constexpr int64_t kChunkBytes = 64;
inline constexpr int64_t kBlockBytes = 4 * kChunkBytes;  // one 32-column block of a group
// Groups of weight rows a thread multiplies by each tile of x rows while they are in L1 (4 x 16
// rows: up to 64 KiB of nibbles at 2048 columns, which stay in L2 for the next tile).
inline constexpr int64_t kGroupsPerTask = 4;
// Rows of x per tile: each chunk of nibbles unpacked serves them all.
inline constexpr int kTileRows = 4;
// How far ahead the nibbles are prefetched into L2, as the skinny kernels do.
inline constexpr int64_t kPrefetchBytes = 32 << 10;

inline int64_t groups_of(int64_t rows) { return (rows + kQ4GroupRows - 1) / kQ4GroupRows; }

// Where the nibble of row l (in its group) and column j (in its block) lies within a block.
inline int64_t nibble_byte(int64_t l, int64_t j) { return (j / 8) * kChunkBytes + 4 * l + j % 4; }
inline int nibble_shift(int64_t j) { return j % 8 >= 4 ? 4 : 0; }

// Rounds x[n] to int8 q[n] on the grid max|x| / 127 and returns that scale.
inline float quantize_run(const float* x, int64_t n, int8_t* q) {
  float largest = 0;
#pragma omp simd reduction(max : largest)
  for (int64_t j = 0; j < n; ++j) largest = std::max(largest, std::fabs(x[j]));
  const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    q[j] = int8_t(std::clamp(std::nearbyint(x[j] * inverse), -127.0f, 127.0f));
  }
  return largest / 127.0f;
}

inline int32_t sum_of(const int8_t* q, int64_t n) {
  int32_t sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += q[j];
  return sum;
}

// Prefetches `bytes` of the weights at `at`, kPrefetchBytes ahead, into L2.
inline void prefetch_ahead(const uint8_t* at, int64_t bytes) {
  for (int64_t line = 0; line < bytes; line += 64)
    __builtin_prefetch(at + kPrefetchBytes + line, 0, 2);
}

// The exact int32 products of one repacked 32-column block, for the lanes' rows from lane0, with
// RM rows of int8 activations (x: row 0's first column of the block; rows `stride` apart). They go
// into independent sums (low and high nibbles, and with one row of x odd and even chunks too),
// added at the end: one chain of eight VPDPBUSD a block left batch-1 decoding waiting on their
// latency.
template <int RM>
void block_products(const uint8_t* block, int64_t lane0, const int8_t* x, int64_t stride,
                    Lanes::Int (&out)[RM]) {
  using L = Lanes;
  constexpr int kChains = RM == 1 ? 4 : 2;
  L::Int sums[RM][kChains];
  for (int m = 0; m < RM; ++m) {
    for (int chain = 0; chain < kChains; ++chain) sums[m][chain] = L::zero_int();
  }
  for (int64_t c = 0; c < 4; ++c) {
    const L::Int packed = L::load(block + c * kChunkBytes + 4 * lane0);
    const L::Int low = L::low(packed), high = L::high(packed);
    const int chain = int(c % (kChains / 2)) * 2;
    for (int m = 0; m < RM; ++m) {
      const int8_t* xq = x + m * stride + 8 * c;
      sums[m][chain] = L::dot(sums[m][chain], low, load_i32(xq));
      sums[m][chain + 1] = L::dot(sums[m][chain + 1], high, load_i32(xq + 4));
    }
  }
  for (int m = 0; m < RM; ++m) {
    out[m] = sums[m][0];
    for (int chain = 1; chain < kChains; ++chain) out[m] = L::add(out[m], sums[m][chain]);
  }
}

// Stores RM rows of the lanes' outputs (plus b, if not null) into y[M, rows] from row m0 and
// column `first`, leaving out lanes past the last row.
template <int RM>
void store_rows(const Lanes::Float (&acc)[RM], const float* b, float* y, int64_t rows,
                int64_t first, int64_t m0) {
  const int n = int(std::clamp<int64_t>(rows - first, 0, Lanes::kLanes));
  if (n == 0) return;
  for (int m = 0; m < RM; ++m) {
    Lanes::store(y + (m0 + m) * rows + first, acc[m], b != nullptr ? b + first : nullptr, n);
  }
}

// Calls tile(std::integral_constant<int, RM>, g, m0) for every group g of weight rows and tile of
// RM <= kTileRows rows of x from m0; a thread takes kGroupsPerTask groups, one contiguous stretch
// of the weights, through every tile of x.
template <typename Tile>
void for_each_tile(int64_t groups, int64_t M, Tile tile) {
  const int64_t tasks = (groups + kGroupsPerTask - 1) / kGroupsPerTask;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t g_end = std::min(groups, (t + 1) * kGroupsPerTask);
    for (int64_t m0 = 0; m0 < M; m0 += kTileRows) {
      for (int64_t g = t * kGroupsPerTask; g < g_end; ++g) {
        switch (std::min<int64_t>(kTileRows, M - m0)) {
          case 1:
            tile(std::integral_constant<int, 1>{}, g, m0);
            break;
          case 2:
            tile(std::integral_constant<int, 2>{}, g, m0);
            break;
          case 3:
            tile(std::integral_constant<int, 3>{}, g, m0);
            break;
          default:
            tile(std::integral_constant<int, kTileRows>{}, g, m0);
        }
      }
    }
  }
}

}  // namespace tessera::kernels::q4
