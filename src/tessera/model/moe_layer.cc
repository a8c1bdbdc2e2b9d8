#include "tessera/model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

using kernels::gemm;
using kernels::linear_backward;
using kernels::linear_forward;
using kernels::swiglu_backward;
using kernels::swiglu_forward;

template <typename T>
MoeLayer<T>::MoeLayer(const ModelConfig& config, int64_t max_tokens)
    : C_(config.d_model),
      F_(config.ffn()),
      E_(config.moe.n_experts),
      k_(config.moe.top_k),
      SF_(config.moe.n_shared * config.ffn()),
      capacity_factor_(config.moe.capacity_factor),
      aux_coef_(config.moe.aux_loss_coef),
      max_tokens_(max_tokens) {
  validate(config);
  check(config.is_moe(), "a MoE layer needs model.moe_experts >= 1");
  check(max_tokens >= 1, "a MoE layer needs room for at least one token, got {}", max_tokens);
  check(max_tokens * k_ <= std::numeric_limits<int32_t>::max(),
        "{} tokens x top_k {} overflow the MoE layer's 32-bit row indices", max_tokens, k_);
  const int64_t N = max_tokens, A = N * k_, hidden_rows = N * std::max(k_, config.moe.n_shared);
  probs_.resize(N * E_);
  gates_.resize(A);
  expert_.resize(A);
  row_.resize(A);
  row_assignment_.resize(A);
  hidden_.resize(A * 2 * F_);
  shared_hidden_.resize(N * 2 * SF_);
  routed_.resize(E_);
  kept_.resize(E_);
  row_begin_.resize(E_ + 1);
  rows_a_.resize(A * C_);
  rows_b_.resize(A * C_);
  act_.resize(hidden_rows * F_);
  dact_.resize(hidden_rows * F_);
  dhidden_.resize(hidden_rows * 2 * F_);
  dgates_.resize(A);
  dlogits_.resize(N * E_);
}

template <typename T>
int64_t MoeLayer<T>::activation_floats(const ModelConfig& config, int64_t N) {
  const int64_t E = config.moe.n_experts, k = config.moe.top_k, F = config.ffn(),
                S = config.moe.n_shared;
  return N * (E + 4 * k + 2 * k * F + 2 * S * F);
}

template <typename T>
T MoeLayer<T>::forward(const T* x, T* y, int64_t N, const MoeWeights<T>& w) {
  check(N >= 1 && N <= max_tokens_, "MoE layer: {} tokens, sized for 1..{}", N, max_tokens_);
  check((w.shared_gate_up != nullptr) == (SF_ > 0) && (w.shared_down != nullptr) == (SF_ > 0),
        "MoE layer: shared expert weights must be given exactly when there are shared experts");
  const int64_t C = C_, F = F_, E = E_, k = k_;

  // Router: softmax then top-k, each token on its own.
  linear_forward<T>(x, w.router, nullptr, probs_.data(), N, C, E);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    T* p = probs_.data() + t * E;
    T max = p[0];
    for (int64_t e = 1; e < E; ++e) max = std::max(max, p[e]);
    T sum = 0;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = std::exp(p[e] - max);
      sum += p[e];
    }
    for (int64_t e = 0; e < E; ++e) p[e] /= sum;
    int32_t* chosen = expert_.data() + t * k;
    T chosen_sum = 0;
    for (int64_t j = 0; j < k; ++j) {
      int32_t best = -1;
      for (int32_t e = 0; e < E; ++e) {
        if (std::find(chosen, chosen + j, e) != chosen + j) continue;
        if (best < 0 || p[e] > p[best]) best = e;  // strict: ties keep the lower index
      }
      chosen[j] = best;
      chosen_sum += p[best];
    }
    for (int64_t j = 0; j < k; ++j) gates_[t * k + j] = p[chosen[j]] / chosen_sum;
  }

  // Capacity is first come, first served, so this pass is sequential by definition. It leaves
  // each kept assignment's rank within its expert in row_, made absolute once the experts'
  // first rows are known.
  const int64_t capacity =
      capacity_factor_ > 0
          ? int64_t(std::ceil(capacity_factor_ * double(N) * double(k) / double(E)))
          : std::numeric_limits<int64_t>::max();
  std::fill(routed_.begin(), routed_.end(), 0);
  std::fill(kept_.begin(), kept_.end(), 0);
  dropped_ = 0;
  for (int64_t a = 0; a < N * k; ++a) {
    const int32_t e = expert_[a];
    ++routed_[e];
    if (kept_[e] < capacity) {
      row_[a] = int32_t(kept_[e]++);
    } else {
      row_[a] = -1;
      ++dropped_;
    }
  }
  row_begin_[0] = 0;
  for (int64_t e = 0; e < E; ++e) row_begin_[e + 1] = row_begin_[e] + kept_[e];
  for (int64_t a = 0; a < N * k; ++a) {
    if (row_[a] < 0) continue;
    row_[a] += int32_t(row_begin_[expert_[a]]);
    row_assignment_[row_[a]] = int32_t(a);
  }
  const int64_t rows = row_begin_[E];

  gather_rows(x, rows_a_.data(), rows);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = row_begin_[e], n = kept_[e];
    if (n == 0) continue;
    linear_forward<T>(rows_a_.data() + r0 * C, w.gate_up + e * 2 * F * C, nullptr,
                      hidden_.data() + r0 * 2 * F, n, C, 2 * F);
  }
  swiglu_forward<T>(hidden_.data(), act_.data(), rows, F);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = row_begin_[e], n = kept_[e];
    if (n == 0) continue;
    linear_forward<T>(act_.data() + r0 * F, w.down + e * C * F, nullptr, rows_b_.data() + r0 * C, n,
                      F, C);
  }

  // The shared experts write y, then each token adds its experts in choice order.
  if (SF_ > 0) {
    linear_forward<T>(x, w.shared_gate_up, nullptr, shared_hidden_.data(), N, C, 2 * SF_);
    swiglu_forward<T>(shared_hidden_.data(), act_.data(), N, SF_);
    linear_forward<T>(act_.data(), w.shared_down, nullptr, y, N, SF_, C);
  } else {
    std::fill(y, y + N * C, T(0));
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    T* yt = y + t * C;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row_[t * k + j];
      if (r < 0) continue;
      const T gate = gates_[t * k + j];
      const T* out = rows_b_.data() + r * C;
      for (int64_t c = 0; c < C; ++c) yt[c] += gate * out[c];
    }
  }

  double balance = 0;
  for (int64_t e = 0; e < E; ++e) {
    double mean_prob = 0;
    for (int64_t t = 0; t < N; ++t) mean_prob += probs_[t * E + e];
    balance += double(routed_[e]) / double(N * k) * (mean_prob / double(N));
  }
  return T(aux_coef_ * double(E) * balance);
}

template <typename T>
void MoeLayer<T>::backward(const T* dy, const T* x, T* dx, int64_t N, const MoeWeights<T>& w,
                           const MoeGrads<T>& g, T aux_scale) {
  const int64_t C = C_, F = F_, E = E_, k = k_, rows = row_begin_[E];

  // Experts. With u = dy * down (the SwiGLU output's gradient before gating), the gate's gradient
  // is dy . (down a) = u . a, and scaling a and u by the gate afterwards yields the gradients of
  // down and of the SwiGLU output without a copy of the expert outputs.
  gather_rows(dy, rows_a_.data(), rows);
  swiglu_forward<T>(hidden_.data(), act_.data(), rows, F);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = row_begin_[e], n = kept_[e];
    if (n == 0) continue;
    gemm<T>(false, false, n, F, C, T(1), rows_a_.data() + r0 * C, C, w.down + e * C * F, F, T(0),
            dact_.data() + r0 * F, F);
  }
  std::fill(dgates_.begin(), dgates_.begin() + N * k, T(0));  // dropped assignments stay 0
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t a = row_assignment_[r];
    T* act = act_.data() + r * F;
    T* dact = dact_.data() + r * F;
    T dot = 0;
    for (int64_t f = 0; f < F; ++f) dot += dact[f] * act[f];
    dgates_[a] = dot;
    const T gate = gates_[a];
    for (int64_t f = 0; f < F; ++f) {
      act[f] *= gate;
      dact[f] *= gate;
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = row_begin_[e], n = kept_[e];
    if (n == 0) continue;
    gemm<T>(true, false, C, F, n, T(1), rows_a_.data() + r0 * C, C, act_.data() + r0 * F, F, T(1),
            g.down + e * C * F, F);
  }
  swiglu_backward<T>(dact_.data(), hidden_.data(), dhidden_.data(), rows, F);
  gather_rows(x, rows_a_.data(), rows);  // the gathered dy is spent
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = row_begin_[e], n = kept_[e];
    if (n == 0) continue;
    linear_backward<T>(dhidden_.data() + r0 * 2 * F, rows_a_.data() + r0 * C,
                       w.gate_up + e * 2 * F * C, rows_b_.data() + r0 * C,
                       g.gate_up + e * 2 * F * C, nullptr, n, C, 2 * F);
  }
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    T* dxt = dx + t * C;
    std::fill(dxt, dxt + C, T(0));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row_[t * k + j];
      if (r < 0) continue;
      const T* d = rows_b_.data() + r * C;
      for (int64_t c = 0; c < C; ++c) dxt[c] += d[c];
    }
  }

  // Router. A gate g_j = p_j / s (s the sum of the token's chosen probabilities) passes
  // dp_j = (dg_j - sum_i dg_i g_i) / s; the aux loss adds coef * E * f_e / N to every dp_e; then
  // the softmax's backward.
  const T aux_grad = T(aux_scale * aux_coef_ * double(E) / (double(N * k) * double(N)));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const T* p = probs_.data() + t * E;
    T* d = dlogits_.data() + t * E;
    for (int64_t e = 0; e < E; ++e) d[e] = aux_grad * T(routed_[e]);
    const int32_t* chosen = expert_.data() + t * k;
    T chosen_sum = 0, gated = 0;
    for (int64_t j = 0; j < k; ++j) {
      chosen_sum += p[chosen[j]];
      gated += dgates_[t * k + j] * gates_[t * k + j];
    }
    for (int64_t j = 0; j < k; ++j) d[chosen[j]] += (dgates_[t * k + j] - gated) / chosen_sum;
    T dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += p[e] * d[e];
    for (int64_t e = 0; e < E; ++e) d[e] = p[e] * (d[e] - dot);
  }
  linear_backward<T>(dlogits_.data(), x, w.router, rows_a_.data(), g.router, nullptr, N, C, E);
  kernels::add<T>(dx, rows_a_.data(), dx, N * C);

  if (SF_ > 0) {
    swiglu_forward<T>(shared_hidden_.data(), act_.data(), N, SF_);
    linear_backward<T>(dy, act_.data(), w.shared_down, dact_.data(), g.shared_down, nullptr, N, SF_,
                       C);
    swiglu_backward<T>(dact_.data(), shared_hidden_.data(), dhidden_.data(), N, SF_);
    linear_backward<T>(dhidden_.data(), x, w.shared_gate_up, rows_a_.data(), g.shared_gate_up,
                       nullptr, N, C, 2 * SF_);
    kernels::add<T>(dx, rows_a_.data(), dx, N * C);
  }
}

template <typename T>
void MoeLayer<T>::gather_rows(const T* src, T* dst, int64_t rows) const {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const T* s = src + row_assignment_[r] / k_ * C_;
    std::copy(s, s + C_, dst + r * C_);
  }
}

template class MoeLayer<float>;
template class MoeLayer<double>;

}  // namespace tessera::model
