#include "tessera/kernels/q4_linear.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/q4_0.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/q4_lanes.h"
#include "tessera/kernels/cpu/q4_layout.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels {

namespace {

// The header, which CUDA's C++17 reads too, cannot include core/q4_0.h.
static_assert(kQ4BlockColumns == kQ4_0BlockSize);
using q4::kBlockBytes;
using q4::nibble_byte;
using q4::nibble_shift;

int64_t blocks_of(int64_t cols) { return (cols + kQ4BlockColumns - 1) / kQ4BlockColumns; }

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
      const int64_t at = m * in + b * kQ4BlockColumns;
      to.scales[m * to.blocks + b] = q4::quantize_run(x + at, kQ4BlockColumns, to.q + at);
      to.offsets[m * to.blocks + b] = 8 * q4::sum_of(to.q + at, kQ4BlockColumns);
    }
  }
}

// y rows [m0, m0 + RM), columns of group g: each block's exact sums, scaled, added in order.
template <int RM>
void group_tile(const Q4Matrix& w, const QuantizedRows& x, const float* b, float* y, int64_t g,
                int64_t m0) {
  using L = q4::Lanes;
  const int64_t blocks = x.blocks, in = w.cols;
  const uint8_t* nibbles = w.nibbles + g * blocks * kBlockBytes;
  const uint16_t* scales = w.scales + g * blocks * kQ4GroupRows;
  for (int64_t lane0 = 0; lane0 < kQ4GroupRows; lane0 += L::kLanes) {
    L::Float acc[RM];
    for (int m = 0; m < RM; ++m) acc[m] = L::zero_float();
    for (int64_t k = 0; k < blocks; ++k) {
      const uint8_t* block = nibbles + k * kBlockBytes;
      if (lane0 == 0) q4::prefetch_ahead(block, kBlockBytes);
      L::Int sums[RM];
      q4::block_products<RM>(block, lane0, x.q + m0 * in + k * kQ4BlockColumns, in, sums);
      const L::Float w_scales = L::scales(scales + k * kQ4GroupRows + lane0);
      for (int m = 0; m < RM; ++m) {
        const int64_t at = (m0 + m) * blocks + k;
        acc[m] = L::add_block(acc[m], sums[m], x.offsets[at], x.scales[at], w_scales);
      }
    }
    q4::store_rows<RM>(acc, b, y, w.rows, g * kQ4GroupRows + lane0, m0);
  }
}

}  // namespace

int64_t q4_nibble_bytes(int64_t rows, int64_t cols) {
  return q4::groups_of(rows) * blocks_of(cols) * kBlockBytes;
}

int64_t q4_scale_count(int64_t rows, int64_t cols) {
  return q4::groups_of(rows) * blocks_of(cols) * kQ4GroupRows;
}

void quantize_q4_rows(const float* w, int64_t rows, int64_t cols, uint8_t* nibbles,
                      uint16_t* scales) {
  check(cols % kQ4BlockColumns == 0,
        "4-bit weights are quantised in blocks of {} columns, but a matrix has {} columns",
        kQ4BlockColumns, cols);
  const int64_t blocks = blocks_of(cols), groups = q4::groups_of(rows);
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
  q4::for_each_tile(q4::groups_of(w.rows), M, [&](auto rows, int64_t g, int64_t m0) {
    group_tile<decltype(rows)::value>(w, xq, b, y, g, m0);
  });
}

}  // namespace

void add_q4_linear_kernels(Backend& backend) { backend.linear_forward_q4 = linear_forward_q4; }

}  // namespace cpu

}  // namespace tessera::kernels
