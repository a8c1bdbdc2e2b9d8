#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/model/model_config.h"

namespace tessera::model {

// One block's MoE parameters, laid out as model_layout() places them: router [E, C], experts'
// gate_up [E, 2F, C] and down [E, C, F], shared gate_up [2SF, C] and down [C, SF]. The shared
// pointers are null when the config has no shared experts.
template <typename T>
struct MoeWeights {
  const T *router, *gate_up, *down, *shared_gate_up, *shared_down;
};

// Gradients of the same shapes; backward accumulates (+=) into them.
template <typename T>
struct MoeGrads {
  T *router, *gate_up, *down, *shared_gate_up, *shared_down;
};

// A Mixture-of-Experts SwiGLU layer over N tokens of C channels.
//
// Routing: probs = softmax(x Wr^T) over the E experts; each token takes its top_k experts by
// probability (ties go to the lower index), ordered by decreasing probability, with gates = those
// probabilities renormalised to sum to 1. With capacity_factor > 0 each expert accepts at most
// ceil(capacity_factor * N * top_k / E) assignments, visited token by token and within a token in
// choice order; later ones are dropped (they contribute nothing, and the surviving gates are not
// renormalised again). y = sum over kept assignments of gate * expert(x) + shared(x).
//
// The auxiliary load-balancing loss (Switch Transformer) is aux_loss_coef * E * sum_e f_e * P_e,
// with f_e the fraction of the N * top_k assignments routed to e before any are dropped and P_e
// the mean router probability of e. f_e is a count, so the gradient reaches the router through
// P_e only.
//
// Each expert's tokens are gathered into contiguous rows (assignments sorted by expert, in token
// order within an expert), so every expert runs two GEMMs over its own rows; results are
// scattered back per token in choice order, which keeps the output independent of the thread
// count. Everything is allocated at construction for up to max_tokens tokens.
template <typename T>
class MoeLayer {
 public:
  MoeLayer(const ModelConfig& config, int64_t max_tokens);

  // x[N, C] -> y[N, C] (written); returns the auxiliary loss, coefficient included. Saves what
  // backward needs, so backward must follow the forward of the same x and weights.
  T forward(const T* x, T* y, int64_t N, const MoeWeights<T>& w);
  // dy = dL/dy and aux_scale = dL/d(aux loss). dx[N, C] is written; parameter gradients
  // accumulate into g.
  void backward(const T* dy, const T* x, T* dx, int64_t N, const MoeWeights<T>& w,
                const MoeGrads<T>& g, T aux_scale);

  // Of the last forward: assignments each expert processed after capacity, and those dropped.
  std::span<const int64_t> tokens_per_expert() const { return kept_; }
  int64_t dropped() const { return dropped_; }

  // Values forward saves for backward, in elements of T, with every int32 index counted as one:
  //   N * (E + 4 * top_k + 2 * top_k * F + 2 * S * F)
  // = router probabilities N*E, per assignment its gate, expert, row and the row's assignment
  //   (4 N top_k), the experts' gate_up outputs (N top_k rows of 2F; the bound, reached when
  //   nothing is dropped) and the shared experts' gate_up output (N rows of 2SF). The SwiGLU
  //   outputs are recomputed in backward rather than kept.
  static int64_t activation_floats(const ModelConfig& config, int64_t N);

 private:
  // dst[r] = src[token of row r] for the first `rows` expert-sorted rows; src is [N, C].
  void gather_rows(const T* src, T* dst, int64_t rows) const;

  int64_t C_, F_, E_, k_, SF_;
  double capacity_factor_, aux_coef_;
  int64_t max_tokens_;

  // Saved for backward.
  std::vector<T> probs_;         // [N, E]
  std::vector<T> gates_;         // [N * k], assignment a = t * k + j
  std::vector<int32_t> expert_;  // [N * k] chosen expert of each assignment
  std::vector<int32_t> row_;     // [N * k] its row in the expert-sorted order, -1 if dropped
  std::vector<int32_t> row_assignment_;  // [N * k] inverse of row_ over the kept rows
  std::vector<T> hidden_;                // [N * k, 2F] experts' gate_up outputs, expert-sorted rows
  std::vector<T> shared_hidden_;         // [N, 2SF]
  std::vector<int64_t> routed_;          // [E] assignments per expert before capacity (f_e * N * k)
  std::vector<int64_t> kept_;            // [E] after capacity
  std::vector<int64_t> row_begin_;       // [E + 1] first row of each expert
  int64_t dropped_ = 0;

  // Scratch, reused by forward and backward.
  std::vector<T> rows_a_, rows_b_;   // [N * k, C]
  std::vector<T> act_, dact_;        // [N * max(k, S), F]
  std::vector<T> dhidden_;           // [N * max(k, S), 2F]
  std::vector<T> dgates_, dlogits_;  // [N * k], [N, E]
};

extern template class MoeLayer<float>;
extern template class MoeLayer<double>;

}  // namespace tessera::model
