#include "tessera/kernels/q4k_linear.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/q4_k.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/q4_lanes.h"
#include "tessera/kernels/cpu/q4_layout.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels {

// Named apart from q4_linear.cc's helpers, which a unity build puts beside these.
namespace q4k {
namespace {

// The header, which CUDA's C++17 reads too, cannot include core/q4_k.h.
static_assert(kQ4KColumns == kQ4KBlockSize && kQ4KSubBlockSize == kQ4BlockColumns);
using q4::kBlockBytes;
constexpr int64_t kPairs = kQ4KSubBlocks / 2;
// One group's super-block: nibbles, then scales [8][16], mins [4][16][2], d [16] and dmin [16].
constexpr int64_t kScalesAt = kQ4KSubBlocks * kBlockBytes;
constexpr int64_t kMinsAt = kScalesAt + kQ4KSubBlocks * kQ4GroupRows;
constexpr int64_t kDAt = kMinsAt + kQ4KSubBlocks * kQ4GroupRows;
constexpr int64_t kDminAt = kDAt + kQ4GroupRows * int64_t(sizeof(uint16_t));
constexpr int64_t kGroupBlockBytes = kDminAt + kQ4GroupRows * int64_t(sizeof(uint16_t));
static_assert(kGroupBlockBytes % 64 == 0);

int64_t supers_of(int64_t cols) { return cols / kQ4KColumns; }

int64_t min_byte(int64_t l, int64_t j) { return (j / 2) * 2 * kQ4GroupRows + 2 * l + j % 2; }

const uint16_t* halves(const uint8_t* p) { return reinterpret_cast<const uint16_t*>(p); }

// Activations quantised per row and super-block: values, scales, and per pair of sub-blocks their
// two sums of values as int16 halves of one int32 (what the mins multiply).
struct QuantizedRows {
  int8_t* q;
  float* scales;
  int32_t* sum_pairs;
  int64_t supers;
};

QuantizedRows carve(float* scratch, int64_t M, int64_t in) {
  const int64_t supers = supers_of(in);
  auto* pairs = reinterpret_cast<int32_t*>(scratch + M * supers);
  return {reinterpret_cast<int8_t*>(pairs + M * supers * kPairs), scratch, pairs, supers};
}

void quantize_activations(const float* x, int64_t M, int64_t in, const QuantizedRows& to) {
#pragma omp parallel for schedule(static) if (M > 1)
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t s = 0; s < to.supers; ++s) {
      const int64_t at = m * in + s * kQ4KColumns;
      to.scales[m * to.supers + s] = q4::quantize_run(x + at, kQ4KColumns, to.q + at);
      for (int64_t k = 0; k < kPairs; ++k) {
        const int8_t* pair = to.q + at + 2 * k * kQ4BlockColumns;
        const auto first = uint16_t(q4::sum_of(pair, kQ4BlockColumns));
        const auto second = uint16_t(q4::sum_of(pair + kQ4BlockColumns, kQ4BlockColumns));
        to.sum_pairs[(m * to.supers + s) * kPairs + k] = int32_t(first | uint32_t(second) << 16);
      }
    }
  }
}

// y rows [m0, m0 + RM), columns of group g: each sub-block's exact sums times the rows' scales,
// and the mins' sums, add up over a super-block, which is then scaled once; in column order.
template <int RM>
void group_tile(const Q4KMatrix& w, const QuantizedRows& x, const float* b, float* y, int64_t g,
                int64_t m0) {
  using L = q4::Lanes;
  const int64_t supers = x.supers, in = w.cols;
  const uint8_t* group = w.blocks + g * supers * kGroupBlockBytes;
  for (int64_t lane0 = 0; lane0 < kQ4GroupRows; lane0 += L::kLanes) {
    L::Float acc[RM];
    for (int m = 0; m < RM; ++m) acc[m] = L::zero_float();
    for (int64_t s = 0; s < supers; ++s) {
      const uint8_t* block = group + s * kGroupBlockBytes;
      if (lane0 == 0) q4::prefetch_ahead(block, kGroupBlockBytes);
      L::Int total[RM];
      for (int m = 0; m < RM; ++m) total[m] = L::zero_int();
      for (int64_t j = 0; j < kQ4KSubBlocks; ++j) {
        L::Int sums[RM];
        q4::block_products<RM>(block + j * kBlockBytes, lane0,
                               x.q + m0 * in + s * kQ4KColumns + j * kQ4BlockColumns, in, sums);
        const uint8_t* scales = block + kScalesAt + j * kQ4GroupRows + lane0;
        for (int m = 0; m < RM; ++m) total[m] = L::scale_sum(total[m], sums[m], scales);
      }
      for (int m = 0; m < RM; ++m) {
        const int64_t at = (m0 + m) * supers + s;
        L::Int mins = L::zero_int();
        for (int64_t k = 0; k < kPairs; ++k) {
          mins = L::min_dot(mins, block + kMinsAt + min_byte(lane0, 2 * k),
                            x.sum_pairs[at * kPairs + k]);
        }
        acc[m] = L::add_super_block(acc[m], total[m], mins, x.scales[at],
                                    halves(block + kDAt) + lane0, halves(block + kDminAt) + lane0);
      }
    }
    q4::store_rows<RM>(acc, b, y, w.rows, g * kQ4GroupRows + lane0, m0);
  }
}

}  // namespace
}  // namespace q4k

int64_t q4k_bytes(int64_t rows, int64_t cols) {
  return q4::groups_of(rows) * q4k::supers_of(cols) * q4k::kGroupBlockBytes;
}

void repack_q4k_rows(const uint8_t* ggml_blocks, int64_t rows, int64_t cols, uint8_t* out) {
  check(cols % kQ4KColumns == 0,
        "Q4_K weights are held in super-blocks of {} columns, but a matrix has {} columns",
        kQ4KColumns, cols);
  const int64_t supers = q4k::supers_of(cols), groups = q4::groups_of(rows);
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t s = 0; s < supers; ++s) {
      uint8_t* block = out + (g * supers + s) * q4k::kGroupBlockBytes;
      std::fill(block, block + q4k::kGroupBlockBytes, uint8_t(0));
      for (int64_t l = 0; l < kQ4GroupRows && g * kQ4GroupRows + l < rows; ++l) {
        const Q4KBlockView from{ggml_blocks +
                                ((g * kQ4GroupRows + l) * supers + s) * kQ4KBlockBytes};
        for (int64_t j = 0; j < kQ4KSubBlocks; ++j) {
          from.scale_min(j, block[q4k::kScalesAt + j * kQ4GroupRows + l],
                         block[q4k::kMinsAt + q4k::min_byte(l, j)]);
          uint8_t* nibbles = block + j * q4k::kBlockBytes;
          for (int64_t i = 0; i < kQ4BlockColumns; ++i) {
            nibbles[q4::nibble_byte(l, i)] |=
                uint8_t(from.level(j * kQ4BlockColumns + i) << q4::nibble_shift(i));
          }
        }
        const uint16_t d = from.d(), dmin = from.dmin();
        std::memcpy(block + q4k::kDAt + 2 * l, &d, sizeof d);
        std::memcpy(block + q4k::kDminAt + 2 * l, &dmin, sizeof dmin);
      }
    }
  }
}

void quantize_q4k_rows(const float* w, int64_t rows, int64_t cols, uint8_t* out) {
  check(cols % kQ4KColumns == 0,
        "Q4_K weights are quantised in super-blocks of {} columns, but a matrix has {} columns",
        kQ4KColumns, cols);
  std::vector<uint8_t> blocks(size_t(rows * q4k::supers_of(cols) * kQ4KBlockBytes));
  quantize_q4_k({w, size_t(rows * cols)}, blocks);
  repack_q4k_rows(blocks.data(), rows, cols, out);
}

void dequantize_q4k_rows(const Q4KMatrix& w, float* out) {
  const int64_t supers = q4k::supers_of(w.cols);
  for (int64_t r = 0; r < w.rows; ++r) {
    const int64_t g = r / kQ4GroupRows, l = r % kQ4GroupRows;
    for (int64_t s = 0; s < supers; ++s) {
      const uint8_t* block = w.blocks + (g * supers + s) * q4k::kGroupBlockBytes;
      const float d = f16_to_f32(q4k::halves(block + q4k::kDAt)[l]);
      const float dmin = f16_to_f32(q4k::halves(block + q4k::kDminAt)[l]);
      for (int64_t j = 0; j < kQ4KSubBlocks; ++j) {
        const float scale = float(block[q4k::kScalesAt + j * kQ4GroupRows + l]);
        const float min = float(block[q4k::kMinsAt + q4k::min_byte(l, j)]);
        for (int64_t i = 0; i < kQ4BlockColumns; ++i) {
          const int q =
              (block[j * q4k::kBlockBytes + q4::nibble_byte(l, i)] >> q4::nibble_shift(i)) & 0x0f;
          out[r * w.cols + s * kQ4KColumns + j * kQ4BlockColumns + i] =
              d * scale * float(q) - dmin * min;
        }
      }
    }
  }
}

int64_t q4k_linear_scratch_size(int64_t in, int64_t rows) {
  // Scales and sum pairs per row and super-block, then the int8 values.
  return rows * q4k::supers_of(in) * (1 + q4k::kPairs) + (rows * in + 3) / 4;
}

namespace cpu {

namespace {

void linear_forward_q4k(const Context&, const float* x, const Q4KMatrix& w, const float* b,
                        float* y, int64_t M, float* scratch) {
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(w.rows) * double(w.cols), 0);
  check(M >= 1 && w.rows >= 1 && w.cols >= 1 && w.cols % kQ4KColumns == 0,
        "linear_forward_q4k: {} rows by a {} x {} matrix (columns a positive multiple of {})", M,
        w.rows, w.cols, kQ4KColumns);
  const q4k::QuantizedRows xq = q4k::carve(scratch, M, w.cols);
  q4k::quantize_activations(x, M, w.cols, xq);
  q4::for_each_tile(q4::groups_of(w.rows), M, [&](auto rows, int64_t g, int64_t m0) {
    q4k::group_tile<decltype(rows)::value>(w, xq, b, y, g, m0);
  });
}

}  // namespace

void add_q4k_linear_kernels(Backend& backend) { backend.linear_forward_q4k = linear_forward_q4k; }

}  // namespace cpu

}  // namespace tessera::kernels
