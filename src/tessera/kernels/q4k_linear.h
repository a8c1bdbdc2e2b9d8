// Linear layers with weights in ggml's Q4_K format (W4A8): each row of a weight matrix is cut into
// super-blocks of 256 columns, each with f16 scales d and dmin and eight sub-blocks of 32 columns
// with 6-bit scales sc and mins m, and its weights q in [0, 15], so that w = d sc q - dmin m (core/
// q4_k.h). Activations are quantised as they arrive, per row and super-block of 256 columns
// (scale max|x| / 127, rounded to nearest) as ggml's q8_K holds them. Within a super-block,
// sc times each sub-block's integer products, and m times its sum of activations, are summed
// exactly in int32; each super-block is then scaled once and the super-blocks added in column
// order, so results depend neither on the row count, the thread count nor the machine.
//
// Held repacked: the rows in groups of 16 (the last padded with zero rows) and, per group and
// super-block, 2368 bytes: the eight sub-blocks' nibbles as the Q4_0 kernel holds a block's (four
// 64-byte chunks, q4_linear.h), the 16 rows' scales sc per sub-block, their mins m in pairs of
// sub-blocks ([4][16 rows][2]), and the 16 rows' d, then their dmin, in f16. 4.625 bits a weight.
#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"

namespace tessera::kernels {

inline constexpr int64_t kQ4KColumns = 256;  // core/q4_k.h's kQ4KBlockSize

struct Q4KMatrix {
  const uint8_t* blocks = nullptr;  // [groups][super-blocks][2368 bytes], as above
  int64_t rows = 0, cols = 0;
};

// Bytes a rows x cols matrix takes; cols must be a multiple of 256.
int64_t q4k_bytes(int64_t rows, int64_t cols);
// Repacks a rows x cols matrix held as ggml Q4_K blocks (each row cols / 256 of them) into out.
void repack_q4k_rows(const uint8_t* ggml_blocks, int64_t rows, int64_t cols, uint8_t* out);
// Quantises w[rows, cols] (finite values) as ggml's quantize_row_q4_K does, into out.
void quantize_q4k_rows(const float* w, int64_t rows, int64_t cols, uint8_t* out);
// The values w holds, d sc q - dmin m, into out[w.rows, w.cols].
void dequantize_q4k_rows(const Q4KMatrix& w, float* out);

// Floats of scratch linear_forward_q4k needs for up to `rows` rows of `in` columns.
int64_t q4k_linear_scratch_size(int64_t in, int64_t rows);

// y[M, w.rows] = quantised(x[M, w.cols]) * w^T, super-block by super-block, + b (b may be null).
void linear_forward_q4k(const Context& ctx, const float* x, const Q4KMatrix& w, const float* b,
                        float* y, int64_t M, float* scratch);

}  // namespace tessera::kernels
