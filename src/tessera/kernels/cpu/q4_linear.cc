#include "tessera/kernels/q4_linear.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/q4_0.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/q4_lanes.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels {

namespace {

// The header, which CUDA's C++17 reads too, cannot include core/q4_0.h.
static_assert(kQ4BlockColumns == kQ4_0BlockSize);
constexpr int64_t kChunkBytes = 64;
constexpr int64_t kBlockBytes = 4 * kChunkBytes;
// Groups of weight rows a thread multiplies by each tile of x rows while they are in L1 (4 x 16
// rows: up to 64 KiB of nibbles at 2048 columns, which stay in L2 for the next tile).
constexpr int64_t kGroupsPerTask = 4;
// Rows of x per tile: each chunk of nibbles unpacked serves them all.
constexpr int kTileRows = 4;
// How far ahead the nibbles are prefetched into L2, as the skinny kernels do.
constexpr int64_t kPrefetchBytes = 32 << 10;

int64_t blocks_of(int64_t cols) { return (cols + kQ4BlockColumns - 1) / kQ4BlockColumns; }
int64_t groups_of(int64_t rows) { return (rows + kQ4GroupRows - 1) / kQ4GroupRows; }

// Where the nibble of row l (in its group) and column j (in its block) lies within a block.
int64_t nibble_byte(int64_t l, int64_t j) { return (j / 8) * kChunkBytes + 4 * l + j % 4; }
int nibble_shift(int64_t j) { return j % 8 >= 4 ? 4 : 0; }

// Activations quantised per row and block of 32 columns: values, scales, and 8 x each block's sum
// of values (what the weights' offset of 8 takes away from it).
struct QuantizedRows {
  int8_t* q;
  float* scales;
  int32_t* offsets;
  int64_t blocks;
};

QuantizedRows carve(float* scratch, int64_t M, int64_t in) {
  const int64_t blocks = blocks_of(in);
  auto* offsets = reinterpret_cast<int32_t*>(scratch + M * blocks);
  return {reinterpret_cast<int8_t*>(offsets + M * blocks), scratch, offsets, blocks};
}

void quantize_activations(const float* x, int64_t M, int64_t in, const QuantizedRows& to) {
#pragma omp parallel for schedule(static) if (M > 1)
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t b = 0; b < to.blocks; ++b) {
      const float* block = x + m * in + b * kQ4BlockColumns;
      float largest = 0;
#pragma omp simd reduction(max : largest)
      for (int64_t j = 0; j < kQ4BlockColumns; ++j)
        largest = std::max(largest, std::fabs(block[j]));
      const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
      int8_t* q = to.q + m * in + b * kQ4BlockColumns;
      int32_t sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < kQ4BlockColumns; ++j) {
        q[j] = int8_t(std::clamp(std::nearbyint(block[j] * inverse), -127.0f, 127.0f));
        sum += q[j];
      }
      to.scales[m * to.blocks + b] = largest / 127.0f;
      to.offsets[m * to.blocks + b] = 8 * sum;
    }
  }
}

// y rows [m0, m0 + RM), columns of group g: the lanes' sums block by block, scaled, in order.
// A block's products go into independent integer sums (low and high nibbles, and with one row of x
// odd and even chunks too), added at the block's end: one chain of eight VPDPBUSD a block left
// batch-1 decoding waiting on their latency.
template <int RM>
void group_tile(const Q4Matrix& w, const QuantizedRows& x, const float* b, float* y, int64_t g,
                int64_t m0) {
  using L = q4::Lanes;
  constexpr int kChains = RM == 1 ? 4 : 2;
  const int64_t blocks = x.blocks, in = w.cols;
  const uint8_t* nibbles = w.nibbles + g * blocks * kBlockBytes;
  const uint16_t* scales = w.scales + g * blocks * kQ4GroupRows;
  for (int half = 0; half < kQ4GroupRows / L::kLanes; ++half) {
    const int64_t lane_bytes = 4 * L::kLanes * half;
    typename L::Float acc[RM];
    for (int m = 0; m < RM; ++m) acc[m] = L::zero_float();
    for (int64_t k = 0; k < blocks; ++k) {
      const uint8_t* block = nibbles + k * kBlockBytes;
      if (half == 0) {
        for (int64_t line = 0; line < kBlockBytes; line += 64) {
          __builtin_prefetch(block + kPrefetchBytes + line, 0, 2);
        }
      }
      typename L::Int sums[RM][kChains];
      for (int m = 0; m < RM; ++m) {
        for (int chain = 0; chain < kChains; ++chain) sums[m][chain] = L::zero_int();
      }
      for (int64_t c = 0; c < 4; ++c) {
        const typename L::Int packed = L::load(block + c * kChunkBytes + lane_bytes);
        const typename L::Int low = L::low(packed), high = L::high(packed);
        const int chain = int(c % (kChains / 2)) * 2;
        for (int m = 0; m < RM; ++m) {
          const int8_t* xq = x.q + (m0 + m) * in + k * kQ4BlockColumns + 8 * c;
          sums[m][chain] = L::dot(sums[m][chain], low, q4::load_i32(xq));
          sums[m][chain + 1] = L::dot(sums[m][chain + 1], high, q4::load_i32(xq + 4));
        }
      }
      const typename L::Float w_scales = L::scales(scales + k * kQ4GroupRows + L::kLanes * half);
      for (int m = 0; m < RM; ++m) {
        typename L::Int sum = sums[m][0];
        for (int chain = 1; chain < kChains; ++chain) sum = L::add(sum, sums[m][chain]);
        const int64_t at = (m0 + m) * blocks + k;
        acc[m] = L::add_block(acc[m], sum, x.offsets[at], x.scales[at], w_scales);
      }
    }
    const int64_t first = g * kQ4GroupRows + L::kLanes * half;
    const int n = int(std::clamp<int64_t>(w.rows - first, 0, L::kLanes));
    if (n == 0) continue;
    for (int m = 0; m < RM; ++m) {
      L::store(y + (m0 + m) * w.rows + first, acc[m], b != nullptr ? b + first : nullptr, n);
    }
  }
}

void rows_tile(const Q4Matrix& w, const QuantizedRows& x, const float* b, float* y, int64_t g,
               int64_t m0, int64_t rows) {
  switch (rows) {
    case 1:
      return group_tile<1>(w, x, b, y, g, m0);
    case 2:
      return group_tile<2>(w, x, b, y, g, m0);
    case 3:
      return group_tile<3>(w, x, b, y, g, m0);
    default:
      return group_tile<kTileRows>(w, x, b, y, g, m0);
  }
}

}  // namespace

int64_t q4_nibble_bytes(int64_t rows, int64_t cols) {
  return groups_of(rows) * blocks_of(cols) * kBlockBytes;
}

int64_t q4_scale_count(int64_t rows, int64_t cols) {
  return groups_of(rows) * blocks_of(cols) * kQ4GroupRows;
}

void quantize_q4_rows(const float* w, int64_t rows, int64_t cols, uint8_t* nibbles,
                      uint16_t* scales) {
  check(cols % kQ4BlockColumns == 0,
        "4-bit weights are quantised in blocks of {} columns, but a matrix has {} columns",
        kQ4BlockColumns, cols);
  const int64_t blocks = blocks_of(cols), groups = groups_of(rows);
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t k = 0; k < blocks; ++k) {
      uint8_t* block = nibbles + (g * blocks + k) * kBlockBytes;
      std::fill(block, block + kBlockBytes, uint8_t(0));
      for (int64_t l = 0; l < kQ4GroupRows; ++l) {
        const int64_t r = g * kQ4GroupRows + l;
        uint8_t q[kQ4BlockColumns] = {};
        const float d =
            r < rows ? quantize_q4_0_block(w + r * cols + k * kQ4BlockColumns, q) : 0.0f;
        scales[(g * blocks + k) * kQ4GroupRows + l] = f32_to_f16(d);
        for (int64_t j = 0; j < kQ4BlockColumns; ++j) {
          block[nibble_byte(l, j)] |= uint8_t(q[j] << nibble_shift(j));
        }
      }
    }
  }
}

void dequantize_q4_rows(const Q4Matrix& w, float* out) {
  const int64_t blocks = blocks_of(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    const int64_t g = r / kQ4GroupRows, l = r % kQ4GroupRows;
    for (int64_t k = 0; k < blocks; ++k) {
      const uint8_t* block = w.nibbles + (g * blocks + k) * kBlockBytes;
      const float d = f16_to_f32(w.scales[(g * blocks + k) * kQ4GroupRows + l]);
      for (int64_t j = 0; j < kQ4BlockColumns; ++j) {
        const int q = (block[nibble_byte(l, j)] >> nibble_shift(j)) & 0x0f;
        out[r * w.cols + k * kQ4BlockColumns + j] = d * float(q - 8);
      }
    }
  }
}

int64_t q4_linear_scratch_size(int64_t in, int64_t rows) {
  // Scales and offsets per row and block, then the int8 values.
  return 2 * rows * blocks_of(in) + (rows * in + 3) / 4;
}

const char* q4_linear_path() { return q4::Lanes::kPath; }

namespace cpu {

namespace {

void linear_forward_q4(const Context&, const float* x, const Q4Matrix& w, const float* b, float* y,
                       int64_t M, float* scratch) {
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(w.rows) * double(w.cols), 0);
  check(M >= 1 && w.rows >= 1 && w.cols >= 1 && w.cols % kQ4BlockColumns == 0,
        "linear_forward_q4: {} rows by a {} x {} matrix (columns a positive multiple of {})", M,
        w.rows, w.cols, kQ4BlockColumns);
  const QuantizedRows xq = carve(scratch, M, w.cols);
  quantize_activations(x, M, w.cols, xq);
  const int64_t groups = groups_of(w.rows);
  const int64_t tasks = (groups + kGroupsPerTask - 1) / kGroupsPerTask;
  // Static: each thread's groups are one contiguous stretch of the nibbles.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t g_end = std::min(groups, (t + 1) * kGroupsPerTask);
    for (int64_t m0 = 0; m0 < M; m0 += kTileRows) {
      for (int64_t g = t * kGroupsPerTask; g < g_end; ++g) {
        rows_tile(w, xq, b, y, g, m0, std::min<int64_t>(kTileRows, M - m0));
      }
    }
  }
}

}  // namespace

void add_q4_linear_kernels(Backend& backend) { backend.linear_forward_q4 = linear_forward_q4; }

}  // namespace cpu

}  // namespace tessera::kernels
