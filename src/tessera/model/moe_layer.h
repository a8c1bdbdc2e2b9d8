#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tessera/kernels/context.h"
#include "tessera/model/collectives.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// One block's MoE parameters on this rank: router [E, C], its experts' gate_up [E_local, 2F, C]
// and down [E_local, C, F], shared gate_up [2SF, C] and down [C, SF]. The shared pointers are
// null when the config has no shared experts. With LoRA adapters on the experts
// (train.lora_targets experts), each expert's: gate_up's A [E_local, 2r, C] (gate's r rows, then
// up's) and B [E_local, 2F, r], down's A [E_local, r, F] and B [E_local, C, r]; null without.
template <typename T>
struct MoeWeights {
  const T *router, *gate_up, *down, *shared_gate_up, *shared_down;
  const T *gate_up_a = nullptr, *gate_up_b = nullptr, *down_a = nullptr, *down_b = nullptr;
};

// Gradients of the same shapes; backward accumulates (+=) into them. Null: a frozen weight, whose
// gradient is not computed (the input's still is).
template <typename T>
struct MoeGrads {
  T *router, *gate_up, *down, *shared_gate_up, *shared_down;
  T *gate_up_a = nullptr, *gate_up_b = nullptr, *down_a = nullptr, *down_b = nullptr;
};

// The ranks a MoE layer works with; each defaults to this rank alone.
struct MoeParallel {
  // Expert parallelism: rank r of `ep` holds experts [r E / ep, (r + 1) E / ep), and tokens are
  // sent to the rank holding their expert and back (all-to-all).
  Collectives* ep = nullptr;
  // The ranks whose tokens together form the micro-batch, in token order: routing capacity and
  // the load-balancing statistics are taken over all of them, so splitting a batch over ranks
  // routes it as one rank would.
  Collectives* batch = nullptr;
  // How many of the batch ranks divide the loss's mean (data-parallel ranks): the auxiliary
  // loss, the same on each of them, passes its whole gradient to each rank's own tokens.
  int64_t loss_ranks = 1;
};

// How many rows of C values a MoE layer's experts may receive and how many hidden rows it may
// hold, for up to N tokens per rank; see moe_activation_floats.
struct MoeRows {
  int64_t assignments = 0;  // N * top_k: the rows this rank sends at most
  int64_t received = 0;     // the rows this rank's experts receive at most
  int64_t hidden = 0;       // max(received, N * n_shared)
};
MoeRows moe_rows(const MoeConfig& moe, int64_t N, int64_t ep, int64_t batch_ranks);

// What forward and backward use and leave, in elements of T: the same for every layer, which
// run one after another, so one serves them all.
template <typename T>
struct MoeScratch {
  // [max(assignments, received), C + 1] each: rows in sent order, rows in this rank's expert
  // order, and the rows in flight (or x's rows gathered again, on one rank).
  std::vector<T> rows_a, rows_b, rows_c;
  std::vector<T> act, dact;        // [hidden, F]
  std::vector<T> dhidden;          // [hidden, 2F]
  std::vector<T> dgates, dlogits;  // [N * k], [N, E]
  // With adapters on the experts: the down-projections [hidden, 2r], down's du [hidden, r], kept
  // from the input gradient's pass to the weights', and gate_up's du [hidden, 2r].
  std::vector<T> lora_u, lora_du, lora_dh;
};

// A Mixture-of-Experts SwiGLU layer over N tokens of C channels.
//
// Routing: probs = softmax(x Wr^T) over the E experts; each token takes its top_k experts by
// probability (ties go to the lower index), ordered by decreasing probability, with gates = those
// probabilities renormalised to sum to 1. With capacity_factor > 0 each expert accepts at most
// ceil(capacity_factor * N * top_k / E) assignments of the whole batch, visited token by token
// (the batch ranks' tokens in rank order) and within a token in choice order; later ones are
// dropped (they contribute nothing, and the surviving gates are not renormalised again).
// y = sum over kept assignments of gate * expert(x) + shared(x). With LoRA adapters on the
// experts, each expert's gate_up and down add their updates, scale (x A^T) B^T (gate and up each
// with its own A and B, as PEFT's w1 and w3).
//
// The auxiliary load-balancing loss (Switch Transformer) is aux_loss_coef * E * sum_e f_e * P_e,
// with f_e the fraction of the batch's N * top_k assignments routed to e before any are dropped
// and P_e the mean router probability of e. f_e is a count, so the gradient reaches the router
// through P_e only.
//
// Kept assignments are sorted by expert (in token order within an expert) and sent, whole rows
// of x, to the rank holding their expert; each rank runs its experts' two GEMMs over the rows it
// received, expert by expert, and sends the outputs back, where each token adds its experts in
// choice order, which keeps the output independent of the thread count. Backward sends each
// row's gradient with its gate and receives the input gradient with the gate's gradient, so no
// expert output is kept. Everything is allocated at construction for up to max_tokens tokens;
// layers built with the same `scratch` share it (it grows to the largest of them).
template <typename T>
class MoeLayer {
 public:
  // Its kernels run in ctx, which must outlive the layer.
  MoeLayer(const kernels::Context& ctx, const ModelConfig& config, int64_t max_tokens,
           const MoeParallel& parallel = {}, std::shared_ptr<MoeScratch<T>> scratch = nullptr);
  const std::shared_ptr<MoeScratch<T>>& scratch() const { return scratch_; }

  // x[N, C] -> y[N, C] (written); returns the auxiliary loss, coefficient included, of the whole
  // batch. Saves what backward needs, so backward must follow the forward of the same x and
  // weights.
  T forward(const T* x, T* y, int64_t N, const MoeWeights<T>& w);
  // dy = dL/dy and aux_scale = dL/d(aux loss). dx[N, C] is written; parameter gradients
  // accumulate into g.
  void backward(const T* dy, const T* x, T* dx, int64_t N, const MoeWeights<T>& w,
                const MoeGrads<T>& g, T aux_scale);

  // Of the last forward, over the whole batch: assignments each expert processed after
  // capacity, and those dropped.
  std::span<const int64_t> tokens_per_expert() const { return kept_; }
  int64_t dropped() const { return dropped_; }

  // Values forward saves for backward, in elements of T, with every int32 index counted as one;
  // see moe_activation_floats.
  static int64_t activation_floats(const ModelConfig& config, int64_t N, int64_t ep = 1,
                                   int64_t batch_ranks = 1);

 private:
  void route(const T* x, int64_t N, const MoeWeights<T>& w);
  void sort_by_expert(int64_t N);
  // Sends the sent-order rows of `width` values to their experts' ranks; `out` receives this
  // rank's rows in expert order. dispatch_back returns rows in that order to where they came from.
  void dispatch(const T* rows, T* out, int64_t width);
  void dispatch_back(const T* rows, T* out, int64_t width);
  void exchange_counts();
  void gather_rows(const T* src, T* dst) const;
  void experts_backward(T* got, const T* in, const MoeWeights<T>& w, const MoeGrads<T>& g);
  void combine_input_gradients(const T* got, T* dx, int64_t N);
  void router_backward(const T* x, T* dx, int64_t N, const MoeWeights<T>& w, const MoeGrads<T>& g,
                       T aux_scale);
  void shared_backward(const T* dy, const T* x, T* dx, int64_t N, const MoeWeights<T>& w,
                       const MoeGrads<T>& g);
  // The adapters' backward of local expert j's rows [r0, r0 + n): du of down from the rows'
  // output gradients (got, ungated) added to dact through down's A, before the gate scales them.
  void down_adapter_input_backward(const T* got, int64_t j, int64_t r0, int64_t n,
                                   const MoeWeights<T>& w);
  // Down's A and B gradients, from act scaled by the gate, and gate_up's from dhidden and the
  // rows' input `in`, whose gradient d_in (written by gate_up's own backward) they add to.
  void adapters_weight_backward(const T* got, const T* in, T* d_in, int64_t j, int64_t r0,
                                int64_t n, const MoeWeights<T>& w, const MoeGrads<T>& g);
  bool adapted() const { return lora_rank_ > 0; }
  bool distributed() const { return ep_ranks_ > 1; }

  const kernels::Context& ctx_;
  int64_t C_, F_, E_, k_, SF_;
  double capacity_factor_, aux_coef_;
  int64_t max_tokens_;
  MoeParallel parallel_;
  int64_t ep_ranks_, ep_rank_, local_experts_;
  int64_t lora_rank_ = 0;  // of the experts' adapters; 0: none
  T lora_scale_ = 0;

  // Saved for backward.
  std::vector<T> probs_;         // [N, E]
  std::vector<T> gates_;         // [N * k], assignment a = t * k + j
  std::vector<int32_t> expert_;  // [N * k] chosen expert of each assignment
  std::vector<int32_t> row_;     // [N * k] its row in the sent (expert-sorted) order, -1 if dropped
  std::vector<int32_t> row_assignment_;  // [N * k] inverse of row_ over the kept rows
  // [received, C]: rows of x this rank's experts took from other ranks (expert parallel; on one
  // rank they are gathered from x again in backward)
  std::vector<T> received_;
  std::vector<T> hidden_;            // [received, 2F] experts' gate_up outputs
  std::vector<T> shared_hidden_;     // [N, 2SF]
  std::vector<double> batch_stats_;  // [2E + 1]: assignments and probability sums per
                                     // expert, then tokens, over the batch
  std::vector<int64_t> kept_;        // [E] over the batch, after capacity
  int64_t dropped_ = 0, batch_tokens_ = 0;
  // Row counts by (rank, local expert): those sent to each rank's experts, and those received
  // from each rank for this rank's experts; with each expert's first received row.
  std::vector<int64_t> sent_counts_, received_counts_, received_begin_;
  int64_t sent_rows_ = 0, received_rows_ = 0;

  std::shared_ptr<MoeScratch<T>> scratch_;
  std::vector<float> counts_;  // per-expert counts on their way between ranks
  std::vector<int64_t> send_elements_, recv_elements_;
  std::vector<int64_t> expert_begin_, next_row_;  // [E + 1], [E_local]
};

// MoeLayer::activation_floats for one block's mixture of experts of d_model C and expert width
// F over N tokens per rank, its experts split over `ep` ranks, its batch's tokens routed
// together over `batch_ranks` ranks:
//   N * (E + 4 k) + received * 2F + (ep > 1 ? received * C : 0) + N * 2 S F
// = router probabilities, per assignment its gate, expert, row and the row's assignment, the
//   gate_up outputs of the rows this rank's experts received, the received rows themselves when
//   they came from other ranks, and the shared experts' gate_up output. The SwiGLU outputs are
//   recomputed in backward rather than kept. received is N k ep, reached when every rank's tokens
//   choose this rank's experts (N k on one rank, where nothing is dropped), and with a capacity
//   factor at most the local experts' capacity, E / ep x ceil(capacity_factor N batch_ranks k / E).
int64_t moe_activation_floats(const MoeConfig& moe, int64_t C, int64_t F, int64_t N, int64_t ep,
                              int64_t batch_ranks);
// The MoeScratch one layer or many share, in elements:
//   3 rows (C + 1) + hidden * 4F + N * (k + E) + hidden * 5 lora_rank,
// rows = max(assignments, received), lora_rank that of adapters on the experts (0: none).
int64_t moe_scratch_floats(const MoeConfig& moe, int64_t C, int64_t F, int64_t N, int64_t ep,
                           int64_t batch_ranks, int64_t lora_rank = 0);
// The rank of the config's LoRA adapters on its experts; 0 when its experts have none.
int64_t expert_lora_rank(const ModelConfig& config);

extern template class MoeLayer<float>;
extern template class MoeLayer<double>;

}  // namespace tessera::model
