#include "tessera/plan/step_work.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/model/block.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/model_layout.h"

namespace tessera::plan {

namespace {

using model::BlockSpec;
using model::ModelConfig;
using model::Part;
using model::PartId;
using model::Precision;
using model::Recompute;

// A mixture of experts' linears, which MoeLayer multiplies in f32; the others are Linear layers,
// which multiply in the step's precision.
bool in_mixture(const Part& p) {
  return p.role == model::Role::kExpert || p.id == PartId::kRouter || p.id == PartId::kSharedIn ||
         p.id == PartId::kSharedOut;
}

struct Linear {
  int64_t in, out;
  bool bias;
};

// The Linear layers of one block, in forward order.
std::vector<Linear> block_linears(const BlockSpec& spec) {
  std::vector<Linear> linears;
  for (const Part& p : spec.parts) {
    if (p.kind == model::PartKind::kLinear && !in_mixture(p)) {
      linears.push_back({p.in, p.out, p.bias});
    }
  }
  return linears;
}

// The gemms of kernels::linear_forward and linear_backward (and their _low twins), over N rows.
GemmShape forward_gemm(const Linear& l, int64_t N, Precision p) {
  return {false, true, N, l.out, l.in, l.bias, p};
}
GemmShape input_grad_gemm(const Linear& l, int64_t N, Precision p) {
  return {false, false, N, l.in, l.out, false, p};
}
GemmShape weight_grad_gemm(const Linear& l, int64_t N, Precision p) {
  return {true, false, l.out, l.in, N, true, p};
}

// The block forwards a step runs: full recomputation runs each again before its backward.
double block_forwards(const StepShape& step) { return step.recompute == Recompute::kFull ? 2 : 1; }

bool low(const StepShape& step) { return step.precision != Precision::kF32; }

// Whether backward runs the norms again: selective recomputation, and a mixture of experts in low
// precision, whose router needs the f32 norm output that only a transient buffer held.
bool norms_recomputed(const BlockSpec& spec, const StepShape& step) {
  return step.recompute == Recompute::kSelective ||
         (step.recompute == Recompute::kNone && low(step) && spec.moe.has_value());
}

// Elements a block's norms normalise per token (each a row of `in` values per row it takes).
double norm_elements_per_token(const BlockSpec& spec) {
  double elements = 0;
  for (const Part& p : spec.parts) {
    if (p.kind == model::PartKind::kNorm) elements += double(p.rows_per_token * p.in);
  }
  return elements;
}

// Elements per token of the matmul inputs a block narrows forward (model::SavedActivation's
// matmul operands: the norm outputs, the attention output, the dense MLP's activation), and of
// those that selective recomputation rebuilds.
struct NarrowedPerToken {
  double forward = 0, recomputed = 0;
};
NarrowedPerToken narrowed_per_token(const BlockSpec& spec) {
  const model::BlockWidths w(spec, model::Sharding{});
  NarrowedPerToken n;
  for (const Part& p : spec.parts) {
    for (const model::SavedActivation& s : p.saves) {
      if (!s.matmul_operand) continue;
      const double elements = double(model::floats_per_row(s.width, w));
      n.forward += elements;
      if (s.dropped_by == Recompute::kSelective) n.recomputed += elements;
    }
  }
  return n;
}

// A GELU or SwiGLU over `outputs` elements, `forwards` times forward and once backward. GELU reads
// x and writes y, and backward reads dy and x and writes dx; SwiGLU reads gate and up for each
// output, and backward writes the gradients of both.
void add_activation(StepElements& w, model::Activation a, double outputs, double forwards) {
  const bool gelu = a == model::Activation::kGelu;
  w.activation_forward += forwards * outputs;
  w.activation_forward_moved += forwards * outputs * (gelu ? 2 : 3);
  w.activation_backward += outputs;
  w.activation_backward_moved += outputs * (gelu ? 3 : 5);
}

// One block's mixture of experts on one rank, as MoeLayer runs it over N tokens with A kept
// assignments (the rows its experts take) of C channels, experts F wide and shared experts SF.
void add_mixture(StepElements& w, const BlockSpec& spec, double N, double A, double forwards) {
  const double C = double(spec.d_model), F = double(spec.ffn), E = double(spec.moe->n_experts);
  const double SF = double(spec.moe->n_shared) * F, W = C + 1;
  // Forward: the router's softmax and top-k over each token's E logits, and its statistics pass
  // over the probabilities (the auxiliary loss is E sums of them); each kept assignment's row of
  // x copied out, its expert's output copied back, and combined (gate times row) into y, which
  // the shared experts wrote (or which is cleared without them).
  w.router_probabilities += forwards * N * E;
  w.streamed +=
      forwards * (N * E + 2 * A * C + 2 * A * C + A * C + 2 * N * C + (SF > 0 ? 0 : N * C));
  // The experts' SwiGLU, forward and again in backward (no expert output is kept), and the shared
  // experts' alike.
  add_activation(w, model::Activation::kSwiglu, A * F, forwards + 1);
  if (SF > 0) add_activation(w, model::Activation::kSwiglu, N * SF, forwards + 1);
  // Backward: each row's output gradient and gate copied out and into expert order, x's rows
  // gathered again, the gate pass over the SwiGLU output and its gradient, the input gradients
  // copied beside the gates' gradients and back, then summed per token into dx; the router's
  // logit gradients from its probabilities; dx gets the router's and the shared experts' input
  // gradients added.
  w.streamed += A * C + A * W + 2 * A * W + 2 * A * C + 4 * A * F + 2 * A * C + 2 * A * W;
  w.streamed += N * C + A * C + 2 * N * E + 3 * N * C + (SF > 0 ? 3 * N * C : 0);
}

}  // namespace

std::string GemmShape::name() const {
  return fmt::format("{}{} {}x{}x{}{}{}{}", trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                     accumulate ? " +C" : "", operands == Precision::kF32 ? "" : " ",
                     operands == Precision::kF32 ? "" : enum_name(operands));
}

void check_modelled(const ModelConfig& c, const StepShape& step) {
  model::check_runnable(c);
  check(step.batch >= 1 && step.seq >= 1 && step.seq <= c.max_seq,
        "a step of batch {} x seq {} does not fit a model with max_seq {}", step.batch, step.seq,
        c.max_seq);
}

std::vector<ExpertRows> expert_rows(const ModelConfig& c, int64_t N) {
  const int64_t E = c.moe.n_experts, assignments = N * c.moe.top_k;
  const int64_t share = assignments / E, more = assignments % E;
  int64_t capacity = assignments;
  if (c.moe.capacity_factor > 0) {
    // MoeLayer's capacity, for a batch of this rank's tokens alone.
    capacity = int64_t(std::ceil(c.moe.capacity_factor * double(assignments) / double(E)));
  }
  std::vector<ExpertRows> rows;
  if (share > 0) rows.push_back({std::min(share, capacity), E - more});
  if (more > 0) rows.push_back({std::min(share + 1, capacity), more});
  return rows;
}

std::map<GemmShape, int64_t> step_gemms(const ModelConfig& config, const StepShape& step) {
  check_modelled(config, step);
  const BlockSpec spec = model::block_spec(config);
  const int64_t N = step.batch * step.seq, L = config.n_layer;
  const auto forwards = int64_t(block_forwards(step));
  std::map<GemmShape, int64_t> calls;
  auto add = [&](const Linear& l, int64_t rows, int64_t times, Precision p) {
    calls[forward_gemm(l, rows, p)] += forwards * times;
    calls[input_grad_gemm(l, rows, p)] += times;
    calls[weight_grad_gemm(l, rows, p)] += times;
  };
  for (const Linear& l : block_linears(spec)) add(l, N, L, step.precision);
  for (const Part& p : spec.parts) {
    if (p.kind != model::PartKind::kLinear || !in_mixture(p)) continue;
    const Linear l{p.in, p.out, p.bias};
    if (p.role != model::Role::kExpert) {
      add(l, N, L, Precision::kF32);
      continue;
    }
    for (const ExpertRows& r : expert_rows(config, N))
      add(l, r.rows, L * r.experts, Precision::kF32);
  }
  const Linear head{config.d_model, config.vocab_size, false};
  ++calls[forward_gemm(head, N, step.precision)];
  ++calls[input_grad_gemm(head, N, step.precision)];
  ++calls[weight_grad_gemm(head, N, step.precision)];
  return calls;
}

double attention_flops(const ModelConfig& c, const StepShape& step, bool backward) {
  const double square = 2.0 * double(step.seq) * double(step.seq) * double(c.head_dim());
  return double(step.batch) * double(c.n_head) * square * (backward ? 5 : 2);
}

StepElements step_elements(const ModelConfig& config, const StepShape& step) {
  check_modelled(config, step);
  const BlockSpec spec = model::block_spec(config);
  const model::ModelLayout layout = model::model_layout(config);
  const bool gpt2 = config.arch == model::Architecture::kGpt2, moe = spec.moe.has_value();
  const double N = double(step.batch * step.seq), L = double(config.n_layer);
  const double C = double(spec.d_model), F = double(spec.ffn), NC = N * C;
  const double V = double(config.vocab_size), forwards = block_forwards(step);
  StepElements w;

  // Norms read their input and write their output; their backward reads dy and x and accumulates
  // into dx (read and write), then reads dy and x again for the weight gradients.
  const double normed = N * norm_elements_per_token(spec);
  const double norm_forward = 2 * normed, norm_backward = 6 * normed, residual_add = 3 * NC;
  // A bias is first broadcast into its output rows, and its gradient reads dy once.
  double bias = 0;
  for (const Linear& l : block_linears(spec)) bias += l.bias ? N * double(l.out) : 0;
  // Each block: its norms, two residual adds and the biases forward; the norms' and biases'
  // gradients backward; and the norms again where backward recomputes them.
  const double recomputed_norms = norms_recomputed(spec, step) ? norm_forward : 0;
  w.streamed += L * (forwards * (norm_forward + 2 * residual_add + bias) + norm_backward + bias +
                     recomputed_norms);
  // Outside the blocks: the embedding (GPT-2 adds a position row to each token row, and backward
  // adds each row's gradient to both tables), the final norm forward and backward, and the
  // residual gradient cleared before backward.
  w.streamed += (gpt2 ? 3 : 2) * NC + 2 * NC + NC + 6 * NC + (gpt2 ? 5 : 3) * NC;

  if (moe) {
    double kept = 0;
    for (const ExpertRows& r : expert_rows(config, int64_t(N))) kept += double(r.rows * r.experts);
    for (int64_t l = 0; l < config.n_layer; ++l) add_mixture(w, spec, N, kept, forwards);
  } else {
    // Selective recomputation runs the dense MLP's activation again before its backward.
    const double again = step.recompute == Recompute::kSelective ? 1 : 0;
    for (int64_t l = 0; l < config.n_layer; ++l) {
      add_activation(w, spec.activation, N * F, forwards + again);
    }
  }
  if (spec.attention.rope) {
    // Rotary embeddings turn q and k in place, forward (recomputations too) and backward.
    const double turned = 2 * N * double(spec.attention.heads + spec.attention.kv_heads) *
                          double(spec.attention.head_dim);
    w.rope_rows += L * (forwards + 1) * N;
    w.rope_moved += L * (forwards + 1) * turned;
  }
  // The fused loss reads each logits row and overwrites it with its gradient.
  w.logits = N * V;

  const double params = double(layout.params.total());
  w.updated_parameters = params;
  w.zeroed_bytes = (step.precision == Precision::kBf16 ? 2 : kFloatBytes) * params;
  if (!low(step)) return w;

  // Narrowed to the matmul format forward: the blocks' matmul inputs, and the final norm's
  // output; then what backward recomputes (the norms' outputs rebuild with them in a mixture of
  // experts, whose selective pass drops no activation of its own).
  const NarrowedPerToken narrowed = narrowed_per_token(spec);
  w.narrowed += L * forwards * N * narrowed.forward + NC;
  if (norms_recomputed(spec, step)) w.narrowed += L * N * narrowed.recomputed;
  // Each Linear layer's output gradient before its backward gemms, the head's [N, vocab] logits
  // gradient among them.
  for (const Linear& l : block_linears(spec)) w.narrowed += L * N * double(l.out);
  w.narrowed += N * V;
  // The parameter store keeps parameters in the low precision and widens, on every acquire, what
  // the model reads in f32 (all but the linear weights): the embedding and head unit once a
  // step, each block forward and again for backward. AdamW writes the stored parameters itself.
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const model::ParameterUnit& x = layout.units[u];
    for (const auto& [b, e] : model::f32_read_ranges(layout, x.begin, x.end)) {
      w.widened += (u == 0 ? 1 : 2) * double(e - b);
    }
  }
  if (step.precision == Precision::kBf16) {
    // bf16 gradients: each unit's backward writes an f32 slot (cleared first), which is narrowed
    // into the bf16 gradients (the step's one micro-batch is their whole sum).
    w.zeroed_bytes += kFloatBytes * params;
    w.narrowed += params;
  }
  return w;
}

}  // namespace tessera::plan
