#include "tessera/core/error.h"
#include "tessera/kernels/cpu/column_sums.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/skinny_linear.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels::cpu {

namespace {

// Below this many rows of x (decoding), reading the weights once in skinny_linear beats gemm_low,
// which on its portable path widens the whole weight matrix first (measured for d_model 768).
constexpr int64_t kSkinnyLowPrecisionBelowRows = 32;

void linear_forward_low(const Context& ctx, const uint16_t* x, const uint16_t* w, const float* b,
                        float* y, int64_t M, int64_t in, int64_t out, LowPrecision p) {
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(in) * double(out), 0);
  if (M < kSkinnyLowPrecisionBelowRows) {
    if (p == LowPrecision::kBf16) {
      skinny_linear<Bf16Product>(x, w, nullptr, b, y, M, in, out);
    } else {
      skinny_linear<Widened<F16Operand, F16Operand>>(x, w, nullptr, b, y, M, in, out);
    }
    return;
  }
  if (b != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t j = 0; j < out; ++j) y[m * out + j] = b[j];
    }
  }
  gemm_low(ctx, false, true, M, out, in, 1.0f, x, in, w, in, b != nullptr ? 1.0f : 0.0f, y, out, p);
}

void linear_backward_low(const Context& ctx, const float* dy, const uint16_t* dy_low,
                         const uint16_t* x, const uint16_t* w, float* dx, float* dw, float* db,
                         int64_t M, int64_t in, int64_t out, LowPrecision p) {
  const OpScope scope(
      OpClass::kMatmul,
      2.0 * double(M) * double(in) * double(out) * ((dx != nullptr) + (dw != nullptr)), 0);
  if (dx != nullptr)
    gemm_low(ctx, false, false, M, in, out, 1.0f, dy_low, out, w, in, 0.0f, dx, in, p);
  if (dw != nullptr)
    gemm_low(ctx, true, false, out, in, M, 1.0f, dy_low, out, x, in, 1.0f, dw, in, p);
  if (db == nullptr) return;
  check(dy != nullptr, "linear_backward_low: the bias gradient needs the f32 dy");
  for_column_blocks(out, [&](int64_t j0, int64_t j1) {
    for (int64_t m = 0; m < M; ++m) {
      const float* row = dy + m * out;
      for (int64_t j = j0; j < j1; ++j) db[j] += row[j];
    }
  });
}

}  // namespace

void add_low_precision_linear_kernels(Backend& backend) {
  backend.linear_forward_low = linear_forward_low;
  backend.linear_backward_low = linear_backward_low;
}

}  // namespace tessera::kernels::cpu
