// Linear layers with 4-bit weights for inference, in ggml's Q4_0 format (W4A8): each row of a
// weight matrix is cut into blocks of 32 columns, and a block keeps one f16 scale d, the value of
// largest magnitude divided by -8, and its weights rounded to q = w / d + 8 in [0, 15], so that
// w ~ d (q - 8). Activations are quantised as they arrive, per row and per block of 32 columns as
// q8_0 does (scale max|x| / 127, values rounded to nearest). A block's products are summed exactly
// in int32 and scaled once; the blocks' scaled sums are added in column order. Every path sums the
// same integers in the same order, so results depend neither on the row count, the thread count
// nor the machine. Decoding reads 4.5 bits a weight, a seventh of f32's bytes.
//
// Held repacked for the matrix units: the rows in groups of 16 (the last group padded with zero
// rows), and within a group, block by block, four 64-byte chunks whose byte 4l + i holds, for the
// group's row l, column 8c + i of the block in its low nibble and column 8c + 4 + i in its high
// one (chunk c, i < 4); then each block's 16 scales. One VPDPBUSD multiplies a chunk's nibbles
// by four columns of activations for all 16 rows.
#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"

namespace tessera::kernels {

inline constexpr int64_t kQ4BlockColumns = 32;  // core/q4_0.h's kQ4_0BlockSize
inline constexpr int64_t kQ4GroupRows = 16;

// w[r][c] is approximately d (q - 8) for the block and nibble that hold it, as above.
struct Q4Matrix {
  const uint8_t* nibbles = nullptr;  // [groups][blocks][4][64]
  const uint16_t* scales = nullptr;  // f16, [groups][blocks][16]
  int64_t rows = 0, cols = 0;
};

// Bytes of nibbles and counts of scales a rows x cols matrix takes; cols must be a multiple of 32.
int64_t q4_nibble_bytes(int64_t rows, int64_t cols);
int64_t q4_scale_count(int64_t rows, int64_t cols);

// Quantises w[rows, cols] (finite values, cols a multiple of 32) block by block as ggml's
// quantize_row_q4_0 does (core/q4_0.h), into the repacked layout.
void quantize_q4_rows(const float* w, int64_t rows, int64_t cols, uint8_t* nibbles,
                      uint16_t* scales);
// The values w holds, d (q - 8), into out[w.rows, w.cols].
void dequantize_q4_rows(const Q4Matrix& w, float* out);

// Floats of scratch linear_forward_q4 needs for up to `rows` rows of `in` columns.
int64_t q4_linear_scratch_size(int64_t in, int64_t rows);

// y[M, w.rows] = quantised(x[M, w.cols]) * w^T, block by block, + b (b may be null), as above.
void linear_forward_q4(const Context& ctx, const float* x, const Q4Matrix& w, const float* b,
                       float* y, int64_t M, float* scratch);

// How the products are taken here, for the run's log: "AVX512-VNNI", "AVX2", ...
const char* q4_linear_path();

}  // namespace tessera::kernels
