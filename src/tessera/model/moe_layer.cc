#include "tessera/model/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tessera/core/error.h"
#include "tessera/kernels/lora.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/block_spec.h"

namespace tessera::model {

using kernels::gemm;
using kernels::linear_backward;
using kernels::linear_forward;
using kernels::swiglu_backward;
using kernels::swiglu_forward;

MoeRows moe_rows(const MoeConfig& moe, int64_t N, int64_t ep, int64_t batch_ranks) {
  const int64_t E = moe.n_experts, k = moe.top_k;
  MoeRows r;
  r.assignments = N * k;
  r.received = r.assignments * ep;
  if (moe.capacity_factor > 0) {
    // The same expression as routing's capacity, at the batch's largest token count.
    const auto capacity =
        int64_t(std::ceil(moe.capacity_factor * double(N * batch_ranks) * double(k) / double(E)));
    r.received = std::min(r.received, E / ep * capacity);
  }
  r.hidden = std::max(r.received, N * moe.n_shared);
  return r;
}

int64_t moe_activation_floats(const MoeConfig& moe, int64_t C, int64_t F, int64_t N, int64_t ep,
                              int64_t batch_ranks) {
  const int64_t E = moe.n_experts, k = moe.top_k, S = moe.n_shared;
  const int64_t received = moe_rows(moe, N, ep, batch_ranks).received;
  return N * (E + 4 * k) + received * 2 * F + (ep > 1 ? received * C : 0) + N * 2 * S * F;
}

int64_t moe_scratch_floats(const MoeConfig& moe, int64_t C, int64_t F, int64_t N, int64_t ep,
                           int64_t batch_ranks, int64_t lora_rank) {
  const MoeRows r = moe_rows(moe, N, ep, batch_ranks);
  return 3 * std::max(r.assignments, r.received) * (C + 1) + r.hidden * 4 * F +
         N * (moe.top_k + moe.n_experts) + r.hidden * 5 * lora_rank;
}

int64_t expert_lora_rank(const ModelConfig& config) {
  if (!config.lora.enabled()) return 0;
  for (const PartId id : lora_target_parts(config)) {
    if (id == PartId::kExpertsIn || id == PartId::kExpertsOut) return config.lora.rank;
  }
  return 0;
}

template <typename T>
int64_t MoeLayer<T>::activation_floats(const ModelConfig& config, int64_t N, int64_t ep,
                                       int64_t batch_ranks) {
  return moe_activation_floats(config.moe, config.d_model, config.ffn(), N, ep, batch_ranks);
}

namespace {

int group_size(const Collectives* c) { return c != nullptr ? c->size() : 1; }
int group_rank(const Collectives* c) { return c != nullptr ? c->rank() : 0; }

}  // namespace

template <typename T>
MoeLayer<T>::MoeLayer(const kernels::Context& ctx, const ModelConfig& config, int64_t max_tokens,
                      const MoeParallel& parallel, std::shared_ptr<MoeScratch<T>> scratch)
    : ctx_(ctx),
      C_(config.d_model),
      F_(config.ffn()),
      E_(config.moe.n_experts),
      k_(config.moe.top_k),
      SF_(config.moe.n_shared * config.ffn()),
      capacity_factor_(config.moe.capacity_factor),
      aux_coef_(config.moe.aux_loss_coef),
      max_tokens_(max_tokens),
      parallel_(parallel),
      ep_ranks_(group_size(parallel.ep)),
      ep_rank_(group_rank(parallel.ep)),
      scratch_(scratch != nullptr ? std::move(scratch) : std::make_shared<MoeScratch<T>>()) {
  validate(config);
  check(config.is_moe(), "a MoE layer needs model.moe_experts >= 1");
  check(max_tokens >= 1, "a MoE layer needs room for at least one token, got {}", max_tokens);
  check(E_ % ep_ranks_ == 0, "{} experts do not split over {} expert-parallel ranks", E_,
        ep_ranks_);
  check(std::is_same_v<T, float> || (ep_ranks_ == 1 && group_size(parallel.batch) == 1),
        "a MoE layer split over ranks computes in f32");
  local_experts_ = E_ / ep_ranks_;
  lora_rank_ = expert_lora_rank(config);
  lora_scale_ = lora_rank_ > 0 ? T(config.lora.scale()) : T(0);
  const int64_t N = max_tokens;
  const MoeRows bound = moe_rows(config.moe, N, ep_ranks_, group_size(parallel.batch));
  const int64_t A = bound.assignments, received = bound.received;
  check(A * ep_ranks_ <= std::numeric_limits<int32_t>::max(),
        "{} tokens x top_k {} overflow the MoE layer's 32-bit row indices", max_tokens, k_);
  probs_.resize(N * E_);
  gates_.resize(A);
  expert_.resize(A);
  row_.resize(A);
  row_assignment_.resize(A);
  if (distributed()) received_.resize(received * C_);
  hidden_.resize(received * 2 * F_);
  shared_hidden_.resize(N * 2 * SF_);
  batch_stats_.resize(2 * E_ + 1);
  kept_.resize(E_);
  sent_counts_.resize(E_);
  received_counts_.resize(E_);
  received_begin_.resize(local_experts_ + 1);
  expert_begin_.resize(E_ + 1);
  next_row_.resize(local_experts_);
  MoeScratch<T>& s = *scratch_;
  auto at_least = [](std::vector<T>& v, int64_t n) {
    if (int64_t(v.size()) < n) v.resize(n);
  };
  const int64_t rows = std::max(A, received);
  for (std::vector<T>* v : {&s.rows_a, &s.rows_b, &s.rows_c}) at_least(*v, rows * (C_ + 1));
  at_least(s.act, bound.hidden * F_);
  at_least(s.dact, bound.hidden * F_);
  at_least(s.dhidden, bound.hidden * 2 * F_);
  at_least(s.dgates, A);
  at_least(s.dlogits, N * E_);
  at_least(s.lora_u, bound.hidden * 2 * lora_rank_);
  at_least(s.lora_du, bound.hidden * lora_rank_);
  at_least(s.lora_dh, bound.hidden * 2 * lora_rank_);
  counts_.resize(std::max<int64_t>(E_ * group_size(parallel.batch), 2 * E_));
  send_elements_.resize(ep_ranks_);
  recv_elements_.resize(ep_ranks_);
}

// Router: softmax then top-k, each token on its own; then the batch's statistics and capacity.
template <typename T>
void MoeLayer<T>::route(const T* x, int64_t N, const MoeWeights<T>& w) {
  const int64_t C = C_, E = E_, k = k_;
  linear_forward<T>(ctx_, x, w.router, nullptr, probs_.data(), N, C, E);
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

  // The batch's assignments per expert, router probability sums and tokens.
  std::fill(batch_stats_.begin(), batch_stats_.end(), 0.0);
  for (int64_t a = 0; a < N * k; ++a) batch_stats_[expert_[a]] += 1;
  for (int64_t e = 0; e < E; ++e) {
    double sum = 0;
    for (int64_t t = 0; t < N; ++t) sum += probs_[t * E + e];
    batch_stats_[E + e] = sum;
  }
  batch_stats_[2 * E] = double(N);
  // Each rank's assignments per expert, so capacity goes first to the earlier ranks' tokens.
  std::vector<int64_t>& earlier = received_counts_;  // reused: [E] assignments of earlier ranks
  std::fill(earlier.begin(), earlier.end(), 0);
  if constexpr (std::is_same_v<T, float>) {
    Collectives* batch = parallel_.batch;
    if (batch != nullptr && batch->size() > 1) {
      if (capacity_factor_ > 0) {
        float* mine = counts_.data() + batch->rank() * E;
        for (int64_t e = 0; e < E; ++e) mine[e] = float(batch_stats_[e]);
        batch->all_gather(mine, counts_.data(), E);
        for (int r = 0; r < batch->rank(); ++r) {
          for (int64_t e = 0; e < E; ++e) earlier[e] += int64_t(counts_[r * E + e]);
        }
      }
      batch->all_reduce(batch_stats_.data(), 2 * E + 1);
    }
  }
  batch_tokens_ = int64_t(batch_stats_[2 * E]);

  // Capacity is first come, first served, so this pass is sequential by definition. It leaves
  // each kept assignment's rank within its expert on this rank in row_.
  const int64_t capacity =
      capacity_factor_ > 0
          ? int64_t(std::ceil(capacity_factor_ * double(batch_tokens_) * double(k) / double(E)))
          : std::numeric_limits<int64_t>::max();
  std::fill(sent_counts_.begin(), sent_counts_.end(), 0);
  for (int64_t a = 0; a < N * k; ++a) {
    const int32_t e = expert_[a];
    row_[a] = earlier[e] + sent_counts_[e] < capacity ? int32_t(sent_counts_[e]++) : -1;
  }
  dropped_ = 0;
  for (int64_t e = 0; e < E; ++e) {
    kept_[e] = std::min<int64_t>(int64_t(batch_stats_[e]), capacity);
    dropped_ += int64_t(batch_stats_[e]) - kept_[e];
  }
}

// Rows in expert order: the first row of each expert, then each kept assignment's absolute row.
template <typename T>
void MoeLayer<T>::sort_by_expert(int64_t N) {
  std::vector<int64_t>& begin = expert_begin_;
  begin[0] = 0;
  for (int64_t e = 0; e < E_; ++e) begin[e + 1] = begin[e] + sent_counts_[e];
  sent_rows_ = begin[E_];
  for (int64_t a = 0; a < N * k_; ++a) {
    if (row_[a] < 0) continue;
    row_[a] += int32_t(begin[expert_[a]]);
    row_assignment_[row_[a]] = int32_t(a);
  }
}

template <typename T>
void MoeLayer<T>::gather_rows(const T* src, T* dst) const {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < sent_rows_; ++r) {
    const T* s = src + row_assignment_[r] / k_ * C_;
    std::copy(s, s + C_, dst + r * C_);
  }
}

// How many rows each rank's experts take from each rank, expert by expert.
template <typename T>
void MoeLayer<T>::exchange_counts() {
  const int64_t El = local_experts_;
  if (!distributed()) {
    std::copy(sent_counts_.begin(), sent_counts_.end(), received_counts_.begin());
  } else if constexpr (std::is_same_v<T, float>) {
    float* send = counts_.data();
    float* recv = counts_.data() + E_;
    for (int64_t e = 0; e < E_; ++e) send[e] = float(sent_counts_[e]);
    std::fill(send_elements_.begin(), send_elements_.end(), El);
    parallel_.ep->all_to_all(send, send_elements_, recv, send_elements_);
    for (int64_t i = 0; i < E_; ++i) received_counts_[i] = int64_t(recv[i]);
  }
  // received_counts_[s * El + j]: rows rank s sends to local expert j.
  received_begin_[0] = 0;
  for (int64_t j = 0; j < El; ++j) {
    int64_t n = 0;
    for (int64_t s = 0; s < ep_ranks_; ++s) n += received_counts_[s * El + j];
    received_begin_[j + 1] = received_begin_[j] + n;
  }
  received_rows_ = received_begin_[El];
  check(received_rows_ * 2 * F_ <= int64_t(hidden_.size()),
        "MoE layer: {} rows arrived for this rank's experts, more than the {} routing allows",
        received_rows_, int64_t(hidden_.size()) / (2 * F_));
}

template <typename T>
void MoeLayer<T>::dispatch(const T* rows, T* out, int64_t width) {
  if (!distributed()) {
    std::copy(rows, rows + sent_rows_ * width, out);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const int64_t El = local_experts_;
    for (int64_t r = 0; r < ep_ranks_; ++r) {
      int64_t sent = 0, got = 0;
      for (int64_t j = 0; j < El; ++j) {
        sent += sent_counts_[r * El + j];
        got += received_counts_[r * El + j];
      }
      send_elements_[r] = sent * width;
      recv_elements_[r] = got * width;
    }
    // Rows arrive rank by rank, each rank's in expert order; this rank's experts want them
    // expert by expert.
    T* arrived = scratch_->rows_c.data();
    parallel_.ep->all_to_all(rows, send_elements_, arrived, recv_elements_);
    std::vector<int64_t>& next = next_row_;
    std::copy(received_begin_.begin(), received_begin_.end() - 1, next.begin());
    int64_t at = 0;
    for (int64_t s = 0; s < ep_ranks_; ++s) {
      for (int64_t j = 0; j < El; ++j) {
        const int64_t n = received_counts_[s * El + j];
        std::copy(arrived + at * width, arrived + (at + n) * width, out + next[j] * width);
        next[j] += n;
        at += n;
      }
    }
  }
}

template <typename T>
void MoeLayer<T>::dispatch_back(const T* rows, T* out, int64_t width) {
  if (!distributed()) {
    std::copy(rows, rows + sent_rows_ * width, out);
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const int64_t El = local_experts_;
    T* leaving = scratch_->rows_c.data();
    std::vector<int64_t>& next = next_row_;
    std::copy(received_begin_.begin(), received_begin_.end() - 1, next.begin());
    int64_t at = 0;
    for (int64_t s = 0; s < ep_ranks_; ++s) {
      for (int64_t j = 0; j < El; ++j) {
        const int64_t n = received_counts_[s * El + j];
        std::copy(rows + next[j] * width, rows + (next[j] + n) * width, leaving + at * width);
        next[j] += n;
        at += n;
      }
    }
    parallel_.ep->all_to_all(leaving, recv_elements_, out, send_elements_);
  }
}

template <typename T>
T MoeLayer<T>::forward(const T* x, T* y, int64_t N, const MoeWeights<T>& w) {
  check(N >= 1 && N <= max_tokens_, "MoE layer: {} tokens, sized for 1..{}", N, max_tokens_);
  check((w.shared_gate_up != nullptr) == (SF_ > 0) && (w.shared_down != nullptr) == (SF_ > 0),
        "MoE layer: shared expert weights must be given exactly when there are shared experts");
  const int64_t C = C_, F = F_, E = E_, k = k_;
  route(x, N, w);
  sort_by_expert(N);
  exchange_counts();

  // Each kept assignment's row of x, sent to its expert's rank.
  gather_rows(x, scratch_->rows_a.data());
  T* in = distributed() ? received_.data() : scratch_->rows_a.data();
  if (distributed()) dispatch(scratch_->rows_a.data(), in, C);
  const int64_t R = received_rows_;
  for (int64_t j = 0; j < local_experts_; ++j) {
    const int64_t r0 = received_begin_[j], n = received_begin_[j + 1] - r0;
    if (n == 0) continue;
    linear_forward<T>(ctx_, in + r0 * C, w.gate_up + j * 2 * F * C, nullptr,
                      hidden_.data() + r0 * 2 * F, n, C, 2 * F);
    if (w.gate_up_a != nullptr) {
      const int64_t r = lora_rank_, pieces[2] = {F, F};
      T* u = scratch_->lora_u.data() + r0 * 2 * r;
      kernels::lora_down<T>(ctx_, in + r0 * C, w.gate_up_a + j * 2 * r * C, u, n, C, 2 * r);
      kernels::lora_up<T>(ctx_, u, w.gate_up_b + j * 2 * F * r, hidden_.data() + r0 * 2 * F, n, r,
                          pieces, lora_scale_);
    }
  }
  swiglu_forward<T>(ctx_, hidden_.data(), scratch_->act.data(), R, F);
  T* out = scratch_->rows_b.data();
  for (int64_t j = 0; j < local_experts_; ++j) {
    const int64_t r0 = received_begin_[j], n = received_begin_[j + 1] - r0;
    if (n == 0) continue;
    linear_forward<T>(ctx_, scratch_->act.data() + r0 * F, w.down + j * C * F, nullptr,
                      out + r0 * C, n, F, C);
    if (w.down_a != nullptr) {
      const int64_t r = lora_rank_, pieces[1] = {C};
      T* u = scratch_->lora_u.data() + r0 * r;
      kernels::lora_down<T>(ctx_, scratch_->act.data() + r0 * F, w.down_a + j * r * F, u, n, F, r);
      kernels::lora_up<T>(ctx_, u, w.down_b + j * C * r, out + r0 * C, n, r, pieces, lora_scale_);
    }
  }
  T* returned = scratch_->rows_a.data();  // the sent rows of x are spent
  dispatch_back(out, returned, C);

  // The shared experts write y, then each token adds its experts in choice order.
  if (SF_ > 0) {
    linear_forward<T>(ctx_, x, w.shared_gate_up, nullptr, shared_hidden_.data(), N, C, 2 * SF_);
    swiglu_forward<T>(ctx_, shared_hidden_.data(), scratch_->act.data(), N, SF_);
    linear_forward<T>(ctx_, scratch_->act.data(), w.shared_down, nullptr, y, N, SF_, C);
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
      const T* o = returned + r * C;
      for (int64_t c = 0; c < C; ++c) yt[c] += gate * o[c];
    }
  }

  double balance = 0;
  const double tokens = double(batch_tokens_);
  for (int64_t e = 0; e < E; ++e) {
    balance += batch_stats_[e] / (tokens * double(k)) * (batch_stats_[E + e] / tokens);
  }
  return T(aux_coef_ * double(E) * balance);
}

template <typename T>
void MoeLayer<T>::backward(const T* dy, const T* x, T* dx, int64_t N, const MoeWeights<T>& w,
                           const MoeGrads<T>& g, T aux_scale) {
  const int64_t C = C_, k = k_, W = C + 1;
  // Each kept row's output gradient (before gating) and its gate go to the expert's rank.
  T* sent = scratch_->rows_a.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < sent_rows_; ++r) {
    const int32_t a = row_assignment_[r];
    const T* d = dy + a / k * C;
    std::copy(d, d + C, sent + r * W);
    sent[r * W + C] = gates_[a];
  }
  T* got = scratch_->rows_b.data();
  dispatch(sent, got, W);
  const T* in = received_.data();
  if (!distributed()) {
    gather_rows(x, scratch_->rows_c.data());
    in = scratch_->rows_c.data();
  }
  experts_backward(got, in, w, g);
  combine_input_gradients(got, dx, N);
  router_backward(x, dx, N, w, g, aux_scale);
  if (SF_ > 0) shared_backward(dy, x, dx, N, w, g);
}

// got: the received rows, each [C output gradients, gate]. Leaves each row's input gradient in
// its first C values and its gate's gradient in the gate's place, and accumulates the experts'
// weight gradients.
template <typename T>
void MoeLayer<T>::experts_backward(T* got, const T* in, const MoeWeights<T>& w,
                                   const MoeGrads<T>& g) {
  const int64_t C = C_, F = F_, W = C + 1, R = received_rows_;
  // With u = dy * down (the SwiGLU output's gradient before gating), the gate's gradient is
  // dy . (down a) = u . a, and scaling a and u by the gate afterwards yields the gradients of
  // down and of the SwiGLU output without a copy of the expert outputs.
  swiglu_forward<T>(ctx_, hidden_.data(), scratch_->act.data(), R, F);
  for (int64_t j = 0; j < local_experts_; ++j) {
    const int64_t r0 = received_begin_[j], n = received_begin_[j + 1] - r0;
    if (n == 0) continue;
    gemm<T>(ctx_, false, false, n, F, C, T(1), got + r0 * W, W, w.down + j * C * F, F, T(0),
            scratch_->dact.data() + r0 * F, F);
    if (w.down_a != nullptr) down_adapter_input_backward(got, j, r0, n, w);
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) {
    T* act = scratch_->act.data() + r * F;
    T* dact = scratch_->dact.data() + r * F;
    T dot = 0;
    for (int64_t f = 0; f < F; ++f) dot += dact[f] * act[f];
    const T gate = got[r * W + C];
    got[r * W + C] = dot;  // the gate's gradient travels back in the gate's place
    for (int64_t f = 0; f < F; ++f) {
      act[f] *= gate;
      dact[f] *= gate;
    }
  }
  for (int64_t j = 0; j < local_experts_ && g.down != nullptr; ++j) {
    const int64_t r0 = received_begin_[j], n = received_begin_[j + 1] - r0;
    if (n == 0) continue;
    gemm<T>(ctx_, true, false, C, F, n, T(1), got + r0 * W, W, scratch_->act.data() + r0 * F, F,
            T(1), g.down + j * C * F, F);
  }
  swiglu_backward<T>(ctx_, scratch_->dact.data(), hidden_.data(), scratch_->dhidden.data(), R, F);
  T* d_in = scratch_->rows_a.data();  // the sent rows are spent: [R, C] of input gradients
  for (int64_t j = 0; j < local_experts_; ++j) {
    const int64_t r0 = received_begin_[j], n = received_begin_[j + 1] - r0;
    if (n == 0) continue;
    linear_backward<T>(ctx_, scratch_->dhidden.data() + r0 * 2 * F, in + r0 * C,
                       w.gate_up + j * 2 * F * C, d_in + r0 * C,
                       g.gate_up != nullptr ? g.gate_up + j * 2 * F * C : nullptr, nullptr, n, C,
                       2 * F);
    if (adapted()) adapters_weight_backward(got, in, d_in, j, r0, n, w, g);
  }
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r) std::copy(d_in + r * C, d_in + (r + 1) * C, got + r * W);
}

template <typename T>
void MoeLayer<T>::down_adapter_input_backward(const T* got, int64_t j, int64_t r0, int64_t n,
                                              const MoeWeights<T>& w) {
  const int64_t C = C_, F = F_, W = C + 1, r = lora_rank_;
  T* du = scratch_->lora_du.data() + r0 * r;
  // du = scale dy B (dy ungated: the gate scales what follows from it), dact += du A.
  gemm<T>(ctx_, false, false, n, r, C, lora_scale_, got + r0 * W, W, w.down_b + j * C * r, r, T(0),
          du, r);
  gemm<T>(ctx_, false, false, n, F, r, T(1), du, r, w.down_a + j * r * F, F, T(1),
          scratch_->dact.data() + r0 * F, F);
}

template <typename T>
void MoeLayer<T>::adapters_weight_backward(const T* got, const T* in, T* d_in, int64_t j,
                                           int64_t r0, int64_t n, const MoeWeights<T>& w,
                                           const MoeGrads<T>& g) {
  const int64_t C = C_, F = F_, W = C + 1, r = lora_rank_;
  T* u = scratch_->lora_u.data() + r0 * 2 * r;
  if (w.down_a != nullptr) {
    // With act scaled by the gate: dB += scale dy^T (act A^T), dA += du^T act.
    const T* act = scratch_->act.data() + r0 * F;
    kernels::lora_down<T>(ctx_, act, w.down_a + j * r * F, u, n, F, r);
    gemm<T>(ctx_, true, false, C, r, n, lora_scale_, got + r0 * W, W, u, r, T(1),
            g.down_b + j * C * r, r);
    gemm<T>(ctx_, true, false, r, F, n, T(1), scratch_->lora_du.data() + r0 * r, r, act, F, T(1),
            g.down_a + j * r * F, F);
  }
  if (w.gate_up_a != nullptr) {
    const int64_t pieces[2] = {F, F};
    T* du = scratch_->lora_dh.data() + r0 * 2 * r;
    const T* a = w.gate_up_a + j * 2 * r * C;
    kernels::lora_down<T>(ctx_, in + r0 * C, a, u, n, C, 2 * r);
    kernels::lora_up_backward<T>(ctx_, scratch_->dhidden.data() + r0 * 2 * F, u,
                                 w.gate_up_b + j * 2 * F * r, du, g.gate_up_b + j * 2 * F * r, n, r,
                                 pieces, lora_scale_);
    kernels::lora_down_backward<T>(ctx_, du, in + r0 * C, a, g.gate_up_a + j * 2 * r * C,
                                   d_in + r0 * C, n, C, 2 * r);
  }
}

// Input gradients, beside the gates' gradients, back to where the rows came from: dx is written
// and each assignment's gate gradient kept for the router.
template <typename T>
void MoeLayer<T>::combine_input_gradients(const T* got, T* dx, int64_t N) {
  const int64_t C = C_, k = k_, W = C + 1;
  T* back = scratch_->rows_a.data();
  dispatch_back(got, back, W);
  std::fill_n(scratch_->dgates.begin(), N * k, T(0));  // dropped assignments stay 0
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    T* dxt = dx + t * C;
    std::fill(dxt, dxt + C, T(0));
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = row_[t * k + j];
      if (r < 0) continue;
      const T* d = back + r * W;
      for (int64_t c = 0; c < C; ++c) dxt[c] += d[c];
      scratch_->dgates[t * k + j] = d[C];
    }
  }
}

// A gate g_j = p_j / s (s the sum of the token's chosen probabilities) passes
// dp_j = (dg_j - sum_i dg_i g_i) / s; the aux loss adds coef * E * f_e / N to every dp_e (over
// the batch's N tokens, each rank's share of the mean passing its whole gradient); then the
// softmax's backward and the router's linear, whose input gradient adds to dx.
template <typename T>
void MoeLayer<T>::router_backward(const T* x, T* dx, int64_t N, const MoeWeights<T>& w,
                                  const MoeGrads<T>& g, T aux_scale) {
  const int64_t C = C_, E = E_, k = k_;
  const double tokens = double(batch_tokens_);
  const T aux_grad = T(double(aux_scale) * double(parallel_.loss_ranks) * aux_coef_ * double(E) /
                       (tokens * double(k) * tokens));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < N; ++t) {
    const T* p = probs_.data() + t * E;
    T* d = scratch_->dlogits.data() + t * E;
    for (int64_t e = 0; e < E; ++e) d[e] = aux_grad * T(batch_stats_[e]);
    const int32_t* chosen = expert_.data() + t * k;
    T chosen_sum = 0, gated = 0;
    for (int64_t j = 0; j < k; ++j) {
      chosen_sum += p[chosen[j]];
      gated += scratch_->dgates[t * k + j] * gates_[t * k + j];
    }
    for (int64_t j = 0; j < k; ++j)
      d[chosen[j]] += (scratch_->dgates[t * k + j] - gated) / chosen_sum;
    T dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += p[e] * d[e];
    for (int64_t e = 0; e < E; ++e) d[e] = p[e] * (d[e] - dot);
  }
  T* scratch = scratch_->rows_a.data();
  linear_backward<T>(ctx_, scratch_->dlogits.data(), x, w.router, scratch, g.router, nullptr, N, C,
                     E);
  kernels::add<T>(ctx_, dx, scratch, dx, N * C);
}

// The merged shared experts, which every token passes through; their input gradient adds to dx.
template <typename T>
void MoeLayer<T>::shared_backward(const T* dy, const T* x, T* dx, int64_t N, const MoeWeights<T>& w,
                                  const MoeGrads<T>& g) {
  const int64_t C = C_;
  T* scratch = scratch_->rows_a.data();
  swiglu_forward<T>(ctx_, shared_hidden_.data(), scratch_->act.data(), N, SF_);
  linear_backward<T>(ctx_, dy, scratch_->act.data(), w.shared_down, scratch_->dact.data(),
                     g.shared_down, nullptr, N, SF_, C);
  swiglu_backward<T>(ctx_, scratch_->dact.data(), shared_hidden_.data(), scratch_->dhidden.data(),
                     N, SF_);
  linear_backward<T>(ctx_, scratch_->dhidden.data(), x, w.shared_gate_up, scratch, g.shared_gate_up,
                     nullptr, N, C, 2 * SF_);
  kernels::add<T>(ctx_, dx, scratch, dx, N * C);
}

template class MoeLayer<float>;
template class MoeLayer<double>;

}  // namespace tessera::model
