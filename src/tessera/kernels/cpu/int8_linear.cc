#include "tessera/kernels/int8_linear.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/onednn_matmul.h"
#include "tessera/kernels/cpu/skinny_linear.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

namespace {

// From this many x rows on, one int8 GEMM beats reading each weight tile once per four x rows
// (measured on the development machine for d_model 768).
constexpr int64_t kGemmFromRows = 32;
// Without AVX512_VNNI: weight rows converted per sgemm call, big enough for sgemm to run at speed,
// small enough that the block stays in the L2 cache while sgemm reads it.
constexpr int64_t kWidenBlockRows = 128;

// Rows quantised symmetrically into integers of type Q (int8 values, stored as Q).
template <typename Q>
void quantize_rows(const float* x, int64_t rows, int64_t cols, Q* q, float* scales) {
#pragma omp parallel for schedule(static) if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float largest = 0;
#pragma omp simd reduction(max : largest)
    for (int64_t c = 0; c < cols; ++c) largest = std::max(largest, std::fabs(row[c]));
    scales[r] = largest / 127.0f;
    const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
    Q* out = q + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
      out[c] = Q(std::clamp(std::nearbyint(row[c] * inverse), -127.0f, 127.0f));
    }
  }
}

bool vnni() {
  static const bool has = __builtin_cpu_supports("avx512vnni");
  return has;
}

// y[m][n] holds the integer sum of row m and weight row n; makes it the layer's output.
void scale_sums(float* y, const float* x_scales, const Int8Matrix& w, const float* b, int64_t M) {
  const int64_t out = w.rows;
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    float* row = y + m * out;
    const float xs = x_scales[m];
#pragma omp simd
    for (int64_t n = 0; n < out; ++n) {
      row[n] = int8_output(row[n], xs, w.scales[n], b != nullptr ? b[n] : 0.0f);
    }
  }
}

// The integer sums through sgemm on the integers as f32, a block of weight rows at a time.
void sums_by_sgemm(const float* xf, const Int8Matrix& w, float* y, int64_t M, float* block) {
  const int64_t in = w.cols, out = w.rows;
  for (int64_t r0 = 0; r0 < out; r0 += kWidenBlockRows) {
    const int64_t n = std::min(kWidenBlockRows, out - r0);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < n; ++r) {
      const int8_t* q = w.q + (r0 + r) * in;
      float* dst = block + r * in;
#pragma omp simd
      for (int64_t c = 0; c < in; ++c) dst[c] = float(q[c]);
    }
    gemm<float>(kCpuContext, false, true, M, n, in, 1.0f, xf, in, block, in, 0.0f, y + r0, out);
  }
}

}  // namespace

void quantize_int8_rows(const float* w, int64_t rows, int64_t cols, int8_t* q, float* scales) {
  quantize_rows(w, rows, cols, q, scales);
}

int64_t int8_linear_scratch_size(int64_t in, int64_t rows) {
  // Row scales, then the quantised rows (as int16 or f32 at most), then a block of widened weights.
  return rows + rows * in + kWidenBlockRows * in;
}

const char* int8_prefill_path() {
  static const std::string path = [] {
    const std::string impl = vnni() ? onednn_matmul_impl(MatmulOperands::kInt8) : "";
    return impl.empty() ? std::string("portable (f32 sums + sgemm)")
                        : "oneDNN matmul (" + impl + ")";
  }();
  return path.c_str();
}

namespace cpu {

namespace {

void linear_forward_int8(const Context&, const float* x, const Int8Matrix& w, const float* b,
                         float* y, int64_t M, float* scratch) {
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(w.rows) * double(w.cols), 0);
  check(M >= 1 && w.rows >= 1 && w.cols >= 1,
        "linear_forward_int8: empty product of {} rows by a {} x {} matrix", M, w.rows, w.cols);
  const int64_t in = w.cols, out = w.rows;
  float* x_scales = scratch;
  void* quantised = scratch + M;
  if (M < kGemmFromRows) {
    auto* xq = static_cast<int16_t*>(quantised);
    quantize_rows(x, M, in, xq, x_scales);
    const Int8Scales scales{x_scales, w.scales};
    skinny_linear<Int8Pairs>(xq, w.q, &scales, b, y, M, in, out);
    return;
  }
  if (vnni()) {
    auto* xq = static_cast<int8_t*>(quantised);
    quantize_rows(x, M, in, xq, x_scales);
    if (onednn_matmul(MatmulOperands::kInt8, false, true, M, out, in, 1.0f, xq, in, w.q, in, 0.0f,
                      y, out)) {
      scale_sums(y, x_scales, w, b, M);
      return;
    }
  }
  auto* xf = static_cast<float*>(quantised);
  quantize_rows(x, M, in, xf, x_scales);
  sums_by_sgemm(xf, w, y, M, xf + M * in);
  scale_sums(y, x_scales, w, b, M);
}

}  // namespace

void add_int8_linear_kernels(Backend& backend) {
  backend.linear_forward_int8 = linear_forward_int8;
}

}  // namespace cpu

}  // namespace tessera::kernels
