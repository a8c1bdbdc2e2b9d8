#include <type_traits>

#include "tessera/kernels/cpu/column_sums.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/skinny_linear.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

// Below this many rows of x (decoding), reading the weights once in skinny_linear beats sgemm
// (measured for d_model 768).
constexpr int64_t kSkinnyBelowRows = 16;

template <typename T>
void linear_forward(const Context& ctx, const T* x, const T* w, const T* b, T* y, int64_t M,
                    int64_t in, int64_t out) {
  const OpScope scope(OpClass::kMatmul, 2.0 * double(M) * double(in) * double(out), 0);
  if constexpr (std::is_same_v<T, float>) {
    if (M < kSkinnyBelowRows) {
      skinny_linear<Widened<F32Operand, F32Operand>>(x, w, nullptr, b, y, M, in, out);
      return;
    }
  }
  if (b != nullptr) {
#pragma omp parallel for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t j = 0; j < out; ++j) y[m * out + j] = b[j];
    }
  }
  gemm<T>(ctx, false, true, M, out, in, T(1), x, in, w, in, b != nullptr ? T(1) : T(0), y, out);
}

template <typename T>
void linear_backward(const Context& ctx, const T* dy, const T* x, const T* w, T* dx, T* dw, T* db,
                     int64_t M, int64_t in, int64_t out) {
  const OpScope scope(
      OpClass::kMatmul,
      2.0 * double(M) * double(in) * double(out) * ((dx != nullptr) + (dw != nullptr)), 0);
  if (dx != nullptr) gemm<T>(ctx, false, false, M, in, out, T(1), dy, out, w, in, T(0), dx, in);
  if (dw != nullptr) gemm<T>(ctx, true, false, out, in, M, T(1), dy, out, x, in, T(1), dw, in);
  if (db == nullptr) return;
  for_column_blocks(out, [&](int64_t j0, int64_t j1) {
    for (int64_t m = 0; m < M; ++m) {
      const T* row = dy + m * out;
      for (int64_t j = j0; j < j1; ++j) db[j] += row[j];
    }
  });
}

}  // namespace

void add_linear_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.linear_forward = linear_forward<float>;
  backend.ops.linear_backward = linear_backward<float>;
  f64.linear_forward = linear_forward<double>;
  f64.linear_backward = linear_backward<double>;
}

}  // namespace tessera::kernels::cpu
