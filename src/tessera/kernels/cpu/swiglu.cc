#include "tessera/kernels/cpu/device_dispatch.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels {

template <typename T>
void swiglu_forward(const Context& ctx, const T* gate_up, T* out, int64_t M, int64_t F) {
  TESSERA_ON_DEVICE(T, ctx, swiglu_forward, gate_up, out, M, F);
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
void swiglu_backward(const Context& ctx, const T* dout, const T* gate_up, T* dgate_up, int64_t M,
                     int64_t F) {
  TESSERA_ON_DEVICE(T, ctx, swiglu_backward, dout, gate_up, dgate_up, M, F);
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

template void swiglu_forward<float>(const Context&, const float*, float*, int64_t, int64_t);
template void swiglu_forward<double>(const Context&, const double*, double*, int64_t, int64_t);
template void swiglu_backward<float>(const Context&, const float*, const float*, float*, int64_t,
                                     int64_t);
template void swiglu_backward<double>(const Context&, const double*, const double*, double*,
                                      int64_t, int64_t);

}  // namespace tessera::kernels
