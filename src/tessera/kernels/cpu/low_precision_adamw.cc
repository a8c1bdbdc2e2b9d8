#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/adamw_step.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/low_precision_convert.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels::cpu {

namespace {

// Parameters a thread takes at a time: the block's gradients and new weights stay in L1 between
// the update and the narrowing.
constexpr int64_t kBlock = 1024;

void adamw_update_low(const Context&, float* master, const float* grad, const uint16_t* grad_bf16,
                      float grad_scale, float* m, float* v, int64_t n, const AdamWParams& hyper,
                      uint16_t* params_low, LowPrecision p) {
  const OpScope scope(OpClass::kOptimizer, 0, (grad != nullptr ? 30.0 : 28.0) * double(n));
  check((grad == nullptr) != (grad_bf16 == nullptr),
        "adamw_update_low takes the gradients in f32 or in bf16, one of the two");
  const AdamWStep<float> step(hyper);
  const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, len = std::min(kBlock, n - begin);
    float g[kBlock];
    if (grad_bf16 != nullptr) {
      from_low_serial(grad_bf16 + begin, g, len, LowPrecision::kBf16);
    } else {
      std::memcpy(g, grad + begin, sizeof(float) * size_t(len));
    }
    float* w = master + begin;
#pragma omp simd
    for (int64_t i = 0; i < len; ++i) {
      w[i] = step.apply(w[i], g[i] * grad_scale, m[begin + i], v[begin + i]);
    }
    to_low_serial(w, params_low + begin, len, p);
  }
}

}  // namespace

void add_low_precision_adamw_kernels(Backend& backend) {
  backend.adamw_update_low = adamw_update_low;
}

}  // namespace tessera::kernels::cpu
