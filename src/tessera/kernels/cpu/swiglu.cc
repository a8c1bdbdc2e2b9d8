#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

template <typename T>
void swiglu_forward(const Context&, const T* gate_up, T* out, int64_t M, int64_t F) {
  const OpScope scope(OpClass::kNormsActivations, 0, 3.0 * double(sizeof(T)) * double(M * F));
  // One row (a decoding step) is not worth waking the thread team.
#pragma omp parallel for schedule(static) if (M > 1)
  for (int64_t m = 0; m < M; ++m) {
    const T* gate = gate_up + m * 2 * F;
    const T* up = gate + F;
    T* o = out + m * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      T g = gate[f];
      o[f] = g / (T(1) + exp_fast(-g)) * up[f];
    }
  }
}

template <typename T>
void swiglu_backward(const Context&, const T* dout, const T* gate_up, T* dgate_up, int64_t M,
                     int64_t F) {
  const OpScope scope(OpClass::kNormsActivations, 0, 5.0 * double(sizeof(T)) * double(M * F));
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    const T* gate = gate_up + m * 2 * F;
    const T* up = gate + F;
    const T* d = dout + m * F;
    T* dgate = dgate_up + m * 2 * F;
    T* dup = dgate + F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      T g = gate[f];
      T sig = T(1) / (T(1) + exp_fast(-g));
      dgate[f] = d[f] * up[f] * sig * (T(1) + g * (T(1) - sig));
      dup[f] = d[f] * g * sig;
    }
  }
}

}  // namespace

void add_swiglu_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.swiglu_forward = swiglu_forward<float>;
  backend.ops.swiglu_backward = swiglu_backward<float>;
  f64.swiglu_forward = swiglu_forward<double>;
  f64.swiglu_backward = swiglu_backward<double>;
}

}  // namespace tessera::kernels::cpu
