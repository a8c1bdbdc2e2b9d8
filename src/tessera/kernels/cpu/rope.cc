#include <cmath>

#include "tessera/core/error.h"
#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

// Backward is the transposed rotation, the same turn with sin negated, so both directions share
// this body and their cos/sin values agree bit for bit.
template <typename T>
void rotate_qk(T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd, int64_t pos0,
               const Rope& rope, double sin_sign) {
  check(hd > 0 && hd % 2 == 0 && hd <= kRopeMaxHeadDim,
        "rope: head dimension {} must be even and at most {}", hd, kRopeMaxHeadDim);
  check(rope.theta > 0, "rope: theta must be positive, got {}", rope.theta);
  constexpr int64_t kMaxPairs = kRopeMaxHeadDim / 2;
  const int64_t half = hd / 2, ld = (H + 2 * KVH) * hd, rotated_heads = H + KVH;
  double inv_freq[kMaxPairs];
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = rope_inverse_frequency(rope, i, hd);
  const double scale = rope_attention_factor(rope);
  // One row (a decoding step) is not worth waking the thread team.
#pragma omp parallel for schedule(static) if (B * T_ > 1)
  for (int64_t bt = 0; bt < B * T_; ++bt) {
    // Angles in double: pos * freq loses too many bits in float at long positions.
    const double pos = double(pos0 + bt % T_);
    T cos_a[kMaxPairs], sin_a[kMaxPairs];
    for (int64_t i = 0; i < half; ++i) {
      double angle = pos * inv_freq[i];
      cos_a[i] = T(scale * std::cos(angle));
      sin_a[i] = T(scale * sin_sign * std::sin(angle));
    }
    T* row = qkv + bt * ld;
    for (int64_t h = 0; h < rotated_heads; ++h) {
      T* x1 = row + h * hd;
      T* x2 = x1 + half;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        T a = x1[i], b = x2[i];
        x1[i] = a * cos_a[i] - b * sin_a[i];
        x2[i] = b * cos_a[i] + a * sin_a[i];
      }
    }
  }
}

template <typename T>
void rope_forward(const Context&, T* qkv, int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd,
                  int64_t pos0, const Rope& rope) {
  const OpScope scope(OpClass::kNormsActivations, 0,
                      2.0 * double(sizeof(T)) * double(B * T_ * (H + KVH) * hd));
  rotate_qk(qkv, B, T_, H, KVH, hd, pos0, rope, 1.0);
}

template <typename T>
void rope_backward(const Context&, T* dqkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                   int64_t hd, int64_t pos0, const Rope& rope) {
  const OpScope scope(OpClass::kNormsActivations, 0,
                      2.0 * double(sizeof(T)) * double(B * T_ * (H + KVH) * hd));
  rotate_qk(dqkv, B, T_, H, KVH, hd, pos0, rope, -1.0);
}

}  // namespace

void add_rope_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.rope_forward = rope_forward<float>;
  backend.ops.rope_backward = rope_backward<float>;
  f64.rope_forward = rope_forward<double>;
  f64.rope_backward = rope_backward<double>;
}

}  // namespace tessera::kernels::cpu
