#include "tessera/kernels/cpu/adamw_step.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCubic = 0.044715;
// Below this many elements (a decoding step's single rows) waking the thread team costs more than
// the work.
constexpr int64_t kParallelFrom = 1 << 15;

template <typename T>
void gelu_forward(const Context&, const T* x, T* y, int64_t n) {
  const OpScope scope(OpClass::kNormsActivations, 0, 2.0 * double(sizeof(T)) * double(n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) {
    T u = T(kSqrt2OverPi) * (x[i] + T(kGeluCubic) * x[i] * x[i] * x[i]);
    y[i] = T(0.5) * x[i] * (T(1) + tanh_fast(u));
  }
}

template <typename T>
void gelu_backward(const Context&, const T* dy, const T* x, T* dx, int64_t n) {
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
void add(const Context&, const T* a, const T* b, T* out, int64_t n) {
  const OpScope scope(OpClass::kNormsActivations, 0, 3.0 * double(sizeof(T)) * double(n));
#pragma omp parallel for simd schedule(static) if (n >= kParallelFrom)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename T>
void scale(const Context&, T* x, T factor, int64_t n) {
  const OpScope scope(OpClass::kOptimizer, 0, 2.0 * double(sizeof(T)) * double(n));
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) x[i] *= factor;
}

template <typename T>
double sum_squares(const Context&, const T* x, int64_t n) {
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
void adamw_update(const Context&, T* param, const T* grad, T* m, T* v, int64_t n,
                  const AdamWParams& p) {
  const OpScope scope(OpClass::kOptimizer, 0, 7.0 * double(sizeof(T)) * double(n));
  const AdamWStep<T> step(p);
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) param[i] = step.apply(param[i], grad[i], m[i], v[i]);
}

}  // namespace

void add_elementwise_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.gelu_forward = gelu_forward<float>;
  backend.ops.gelu_backward = gelu_backward<float>;
  backend.ops.add = add<float>;
  backend.ops.scale = scale<float>;
  backend.ops.sum_squares = sum_squares<float>;
  backend.ops.adamw_update = adamw_update<float>;
  f64.gelu_forward = gelu_forward<double>;
  f64.gelu_backward = gelu_backward<double>;
  f64.add = add<double>;
  f64.scale = scale<double>;
  f64.sum_squares = sum_squares<double>;
  f64.adamw_update = adamw_update<double>;
}

}  // namespace tessera::kernels::cpu
