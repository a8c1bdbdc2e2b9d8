#include "tessera/kernels/cpu/adamw_step.h"
#include "tessera/kernels/cpu/device_dispatch.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;
// Below this many elements (a decoding step's single rows) waking the thread team costs more than
// the work.
constexpr int64_t kParallelFrom = 1 << 15;
}  // namespace

template <typename T>
void gelu_forward(const Context& ctx, const T* x, T* y, int64_t n) {
  TESSERA_ON_DEVICE(T, ctx, gelu_forward, x, y, n);
  const OpScope scope(OpClass::kNormsActivations, 0, 2.0 * double(sizeof(T)) * double(n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    T u = T(kSqrt2OverPi) * (x[i] + T(kGeluCubic) * x[i] * x[i] * x[i]);
    y[i] = T(0.5) * x[i] * (T(1) + tanh_fast(u));
  }
}

template <typename T>
void gelu_backward(const Context& ctx, const T* dy, const T* x, T* dx, int64_t n) {
  TESSERA_ON_DEVICE(T, ctx, gelu_backward, dy, x, dx, n);
  const OpScope scope(OpClass::kNormsActivations, 0, 3.0 * double(sizeof(T)) * double(n));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    T xi = x[i];
    T u = T(kSqrt2OverPi) * (xi + T(kGeluCubic) * xi * xi * xi);
    T t = tanh_fast(u);
    T du = T(kSqrt2OverPi) * (T(1) + T(3 * kGeluCubic) * xi * xi);
    dx[i] = dy[i] * (T(0.5) * (T(1) + t) + T(0.5) * xi * (T(1) - t * t) * du);
  }
}

template <typename T>
void add(const Context& ctx, const T* a, const T* b, T* out, int64_t n) {
  TESSERA_ON_DEVICE(T, ctx, add, a, b, out, n);
  const OpScope scope(OpClass::kNormsActivations, 0, 3.0 * double(sizeof(T)) * double(n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void scale(const Context& ctx, T* x, T factor, int64_t n) {
  TESSERA_ON_DEVICE(T, ctx, scale, x, factor, n);
  const OpScope scope(OpClass::kOptimizer, 0, 2.0 * double(sizeof(T)) * double(n));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

template <typename T>
double sum_squares(const Context& ctx, const T* x, int64_t n) {
  TESSERA_ON_DEVICE(T, ctx, sum_squares, x, n);
  const OpScope scope(OpClass::kOptimizer, 0, double(sizeof(T)) * double(n));
  constexpr int64_t kChunk = 1 << 14;
  int64_t chunks = (n + kChunk - 1) / kChunk;
  double total = 0;
#pragma omp parallel for ordered schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    double partial = 0;
    int64_t end = std::min(n, (c + 1) * kChunk);
#pragma omp simd reduction(+ : partial)
    for (int64_t i = c * kChunk; i < end; ++i) partial += double(x[i]) * double(x[i]);
#pragma omp ordered
    total += partial;
  }
  return total;
}

template <typename T>
void adamw_update(const Context& ctx, T* param, const T* grad, T* m, T* v, int64_t n,
                  const AdamWParams& p) {
  TESSERA_ON_DEVICE(T, ctx, adamw_update, param, grad, m, v, n, p);
  const OpScope scope(OpClass::kOptimizer, 0, 7.0 * double(sizeof(T)) * double(n));
  const AdamWStep<T> step(p);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) param[i] = step.apply(param[i], grad[i], m[i], v[i]);
}

#define TESSERA_INSTANTIATE(T)                                                     \
  template void gelu_forward<T>(const Context&, const T*, T*, int64_t);            \
  template void gelu_backward<T>(const Context&, const T*, const T*, T*, int64_t); \
  template void add<T>(const Context&, const T*, const T*, T*, int64_t);           \
  template void scale<T>(const Context&, T*, T, int64_t);                          \
  template double sum_squares<T>(const Context&, const T*, int64_t);               \
  template void adamw_update<T>(const Context&, T*, const T*, T*, T*, int64_t, const AdamWParams&);
TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(double)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::kernels
