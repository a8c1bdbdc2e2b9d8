// Linear layers whose weights are held as int8 for inference: each weight row has one f32 scale
// (symmetric, scale = max|row| / 127, values rounded to nearest), activations stay f32 and the
// products accumulate in f32. Decoding reads every weight once per token, so a quarter of the f32
// bytes is up to four times the tokens per second where memory bandwidth is the limit.
#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"

namespace tessera::kernels {

// w[r][c] is approximately scales[r] * q[r * cols + c].
struct Int8Matrix {
  const int8_t* q = nullptr;
  const float* scales = nullptr;
  int64_t rows = 0, cols = 0;
};

// Quantises w[rows, cols] (finite values) into q and scales; an all-zero row gets scale 0.
void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales);

// Floats of scratch linear_forward_int8 needs for a matrix of `in` columns.
int64_t int8_linear_scratch_size(int64_t in);

// y[M, w.rows] = x[M, w.cols] * dequant(w)^T + b (b may be null). Small M (decoding) converts the
// weights in registers; large M (prefill) dequantises blocks of rows into scratch for sgemm.
void linear_forward_int8(const Context& ctx, const float* x, const Int8Matrix& w, const float* b,
                         float* y, int64_t M, float* scratch);

}  // namespace tessera::kernels
