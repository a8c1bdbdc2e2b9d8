#include "tessera/kernels/int8_linear.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/device_dispatch.h"
#include "tessera/kernels/cpu/skinny_linear.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

namespace {

// From this many x rows on, converting each weight once into f32 for sgemm beats converting it
// in registers once per four x rows (measured on the development machine for d_model 768).
constexpr int64_t kDequantizeFromRows = 32;
// Weight rows dequantised per sgemm call: big enough for sgemm to run at speed, small enough
// that the block stays in the L2 cache while sgemm reads it.
constexpr int64_t kDequantizeBlockRows = 128;

void linear_dequantized(const float* x, const Int8Matrix& w, const float* b, float* y, int64_t M,
                        float* scratch) {
  const int64_t in = w.cols, out = w.rows;
  for (int64_t r0 = 0; r0 < out; r0 += kDequantizeBlockRows) {
    const int64_t n = std::min(kDequantizeBlockRows, out - r0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const int8_t* q = w.q + (r0 + r) * in;
      const float s = w.scales[r0 + r];
      float* dst = scratch + r * in;
#pragma omp simd
      for (int64_t c = 0; c < in; ++c) dst[c] = s * float(q[c]);
    }
    float beta = 0.0f;
    if (b != nullptr) {
#pragma omp parallel for schedule(static)
      for (int64_t m = 0; m < M; ++m) std::copy(b + r0, b + r0 + n, y + m * out + r0);
      beta = 1.0f;
    }
    gemm<float>(kCpuContext, false, true, M, n, in, 1.0f, x, in, scratch, in, beta, y + r0, out);
  }
}

}  // namespace

void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w + r * cols;
    float largest = 0;
#pragma omp simd reduction(max : largest)
    for (int64_t c = 0; c < cols; ++c) largest = std::max(largest, std::fabs(row[c]));
    scales[r] = largest / 127.0f;
    const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
    int8_t* out = q + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      out[c] = int8_t(std::clamp(std::nearbyint(row[c] * inverse), -127.0f, 127.0f));
    }
  }
}

int64_t int8_linear_scratch_size(int64_t in) { return kDequantizeBlockRows * in; }

void linear_forward_int8(const Context& ctx, const float* x, const Int8Matrix& w, const float* b,
                         float* y, int64_t M, float* scratch) {
  TESSERA_CPU_ONLY(ctx, linear_forward_int8, "int8 weights are multiplied on the CPU only");
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(w.rows) * double(w.cols), 0);
  check(M >= 1 && w.rows >= 1 && w.cols >= 1,
        "linear_forward_int8: empty product of {} rows by a {} x {} matrix", M, w.rows, w.cols);
  if (M < kDequantizeFromRows) {
    skinny_linear<Widened<Int8Operand, F32Operand>>(x, w.q, w.scales, b, y, M, w.cols, w.rows);
  } else {
    linear_dequantized(x, w, b, y, M, scratch);
  }
}

}  // namespace tessera::kernels
