#include <algorithm>
#include <cmath>

#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/kernels/ops.h"

namespace tessera::kernels::cpu {

namespace {

template <typename T>
void softmax_cross_entropy(const Context&, T* logits, const int32_t* targets, T* losses, int64_t M,
                           int64_t V, T grad_scale) {
  const OpScope scope(OpClass::kLoss, 0,
                      (grad_scale != T(0) ? 2.0 : 1.0) * double(sizeof(T)) * double(M * V));
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    T* row = logits + m * V;
    if (targets[m] == kIgnoredTarget) {
      losses[m] = T(0);
      if (grad_scale != T(0)) std::fill(row, row + V, T(0));
      continue;
    }
    T max = row[0];
#pragma omp simd reduction(max : max)
    for (int64_t v = 0; v < V; ++v) max = std::max(max, row[v]);
    const T target_logit = row[targets[m]];
    T sum = 0;
    if (grad_scale == T(0)) {
#pragma omp simd reduction(+ : sum)
      for (int64_t v = 0; v < V; ++v) sum += exp_fast(row[v] - max);
      losses[m] = std::log(sum) + max - target_logit;
      continue;
    }
    // Keep the exponentials in place so the gradient pass needs no second exp.
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) {
      row[v] = exp_fast(row[v] - max);
      sum += row[v];
    }
    losses[m] = std::log(sum) + max - target_logit;
    const T factor = grad_scale / sum;
#pragma omp simd
    for (int64_t v = 0; v < V; ++v) row[v] *= factor;
    row[targets[m]] -= grad_scale;
  }
}

}  // namespace

void add_cross_entropy_kernels(Backend& backend, OpKernels<double>& f64) {
  backend.ops.softmax_cross_entropy = softmax_cross_entropy<float>;
  f64.softmax_cross_entropy = softmax_cross_entropy<double>;
}

}  // namespace tessera::kernels::cpu
