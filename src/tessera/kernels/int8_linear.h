// Linear layers in int8 for inference (W8A8): each weight row has one f32 scale (symmetric, scale
// = max|row| / 127, values rounded to nearest), and each row of activations is quantised the same
// way as it arrives. The int8 products are summed exactly in int32 and each sum is scaled once,
// y = sum * (x scale * w scale) + b. Decoding reads every weight once per token, so a quarter of
// the f32 bytes is up to four times the tokens per second where memory bandwidth is the limit,
// and a prefill multiplies int8 by int8 on the matrix units (AVX512_VNNI, AMX-int8). Every path
// sums the same integers, so results do not depend on the row count or the thread count, nor on
// the machine, except in prefills on CPUs without AVX512_VNNI: there the products are summed in
// f32, exactly while a sum stays below 2^24.
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

// Floats of scratch linear_forward_int8 needs for up to `rows` rows of `in` columns.
int64_t int8_linear_scratch_size(int64_t in, int64_t rows);

// y[M, w.rows] = quantised(x[M, w.cols]) * w^T, scaled, + b (b may be null), as above.
void linear_forward_int8(const Context& ctx, const float* x, const Int8Matrix& w, const float* b,
                         float* y, int64_t M, float* scratch);

// How a prefill multiplies int8 here, for the run's log: "oneDNN matmul (brg:avx512_core_vnni)"
// or "portable (f32 sums + sgemm)".
const char* int8_prefill_path();

}  // namespace tessera::kernels
