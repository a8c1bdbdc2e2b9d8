#include <algorithm>

#include "tessera/kernels/cpu/column_sums.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

template <typename T>
void embedding_forward(const Context&, const int32_t* tokens, const T* wte, const T* wpe, T* x,
                       int64_t B, int64_t T_, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0,
                      (wpe != nullptr ? 3.0 : 2.0) * double(sizeof(T)) * double(B * T_ * C));
  // One row (a decoding step) is not worth waking the thread team.
#pragma omp parallel for schedule(static) if (B * T_ > 1)
  for (int64_t bt = 0; bt < B * T_; ++bt) {
    const T* tok = wte + int64_t(tokens[bt]) * C;
    T* out = x + bt * C;
    if (wpe == nullptr) {
      std::copy(tok, tok + C, out);
      continue;
    }
    const T* pos = wpe + (bt % T_) * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) out[c] = tok[c] + pos[c];
  }
}

template <typename T>
void embedding_backward(const Context&, const T* dx, const int32_t* tokens, T* dwte, T* dwpe,
                        int64_t B, int64_t T_, int64_t C) {
  const OpScope scope(OpClass::kNormsActivations, 0,
                      (dwpe != nullptr ? 5.0 : 3.0) * double(sizeof(T)) * double(B * T_ * C));
  for_column_blocks(C, [&](int64_t c0, int64_t c1) {
    for (int64_t bt = 0; bt < B * T_; ++bt) {
      const T* d = dx + bt * C;
      T* tok = dwte + int64_t(tokens[bt]) * C;
      for (int64_t c = c0; c < c1; ++c) tok[c] += d[c];
      if (dwpe == nullptr) continue;
      T* pos = dwpe + (bt % T_) * C;
      for (int64_t c = c0; c < c1; ++c) pos[c] += d[c];
    }
  });
}

}  // namespace

void add_embedding_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.embedding_forward = embedding_forward<float>;
  backend.ops.embedding_backward = embedding_backward<float>;
  f64.embedding_forward = embedding_forward<double>;
  f64.embedding_backward = embedding_backward<double>;
}

}  // namespace tessera::kernels::cpu
