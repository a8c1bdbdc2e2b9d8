#include "tessera/plan/cost_model.h"

#include <algorithm>
#include <cmath>

#include "tessera/dist/zero_memory.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/model_layout.h"

namespace tessera::plan {

namespace {

using model::Recompute;

constexpr double kBf16 = 2;  // bytes per activation or gradient element on the wire
// A run cannot fill all of HBM: the allocator, communication buffers and workspace take some.
constexpr double kUsableHbm = 0.92;

// Fraction of peak a chip's matmuls reach: it approaches `peak_fraction` as the narrowest
// per-chip matrix dimension (d_model, or the MLP's hidden width over the tensor-parallel ranks)
// grows, half of the way there at `half_width`. Both were fitted, per accelerator family, to the
// published runs in tests/plan/published_runs.toml (docs/planner.md).
struct MatmulEfficiency {
  double peak_fraction, half_width;
};

MatmulEfficiency matmul_efficiency_of(const Accelerator& a) {
  if (a.kind == "tpu") return {0.90, 250};
  return {0.80, 2000};
}

}  // namespace

ParameterSplit split_parameters(const model::ModelConfig& c) {
  const model::ModelLayout layout = model::model_layout(c);
  ParameterSplit s;
  for (const model::ParamInfo& p : layout.params.entries()) {
    const double n = double(p.shape.numel());
    const bool expert = p.name.find(".moe.experts.") != std::string::npos;
    (expert ? s.experts : s.dense) += n;
    if (p.shape.rank() < 2) continue;
    const bool embedding = p.name == "wte.weight" || p.name == "wpe.weight";
    if (p.name == "lm_head.weight" || (p.name == "wte.weight" && c.tie_embeddings)) {
      s.head_matmul += n;
    } else if (!embedding) {
      s.blocks_matmul += expert ? n * double(c.moe.top_k) / double(c.moe.n_experts) : n;
    }
  }
  return s;
}

namespace {

// Seconds for a collective over `ranks` ranks, each holding `bytes` of the full buffer, where
// `per_domain` consecutive members share a scale-up domain: the part inside a domain moves at
// scale-up bandwidth, the rest (1/per_domain of the data) at scale-out bandwidth. `passes` is 2
// for an all-reduce, 1 for a reduce-scatter or an all-gather.
double collective_seconds(double bytes, int64_t ranks, int64_t per_domain, double passes,
                          const Accelerator& a) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const int64_t inner = std::clamp<int64_t>(per_domain, 1, ranks);
  const int64_t outer = (ranks + inner - 1) / inner;
  double t = passes * double(inner - 1) / double(inner) * bytes / a.scaleup_bandwidth;
  if (outer > 1) {
    t +=
        passes * double(outer - 1) / double(outer) * (bytes / double(inner)) / a.scaleout_bandwidth;
  }
  return t;
}

std::string check_layout(const model::ModelConfig& c, const Layout& l, const Workload& w) {
  if (c.n_head % l.tp != 0) return fmt::format("tp={} does not divide {} heads", l.tp, c.n_head);
  if (c.n_layer % (l.pp * l.vpp) != 0) {
    return fmt::format("pp x vpp = {} does not divide {} layers", l.pp * l.vpp, c.n_layer);
  }
  if (l.vpp > 1 && l.pp == 1) return "vpp > 1 needs pp > 1";
  if (w.global_batch % (l.dp * l.micro_batch) != 0) {
    return fmt::format("dp x mb = {} does not divide the global batch of {} sequences",
                       l.dp * l.micro_batch, w.global_batch);
  }
  const int64_t micro_batches = w.global_batch / (l.dp * l.micro_batch);
  if (l.vpp > 1 && micro_batches % l.pp != 0) {
    return fmt::format("the interleaved schedule needs micro-batches ({}) divisible by pp ({})",
                       micro_batches, l.pp);
  }
  if (l.ep > 1 && (!c.is_moe() || l.dp % l.ep != 0 || c.moe.n_experts % l.ep != 0)) {
    return fmt::format("ep={} needs an MoE model whose experts and dp={} it divides", l.ep, l.dp);
  }
  return "";
}

}  // namespace

FlopsPerToken flops_per_token(const model::ModelConfig& c, int64_t seq_len, Recompute recompute) {
  return flops_per_token(c, split_parameters(c), seq_len, recompute);
}

FlopsPerToken flops_per_token(const model::ModelConfig& c, const ParameterSplit& s, int64_t seq_len,
                              Recompute recompute) {
  const double attention_width = double(c.n_head * c.head_dim());
  const double attention_forward = 4.0 * double(c.n_layer) * double(seq_len) * attention_width;
  FlopsPerToken f;
  f.model = 6 * (s.blocks_matmul + s.head_matmul) + 3 * attention_forward;
  f.hardware = f.model;
  if (recompute == Recompute::kFull) f.hardware += 2 * s.blocks_matmul + attention_forward;
  if (recompute == Recompute::kSelective) f.hardware += attention_forward;
  return f;
}

Estimate estimate(const model::ModelConfig& c, const Accelerator& a, const Layout& l,
                  const Workload& w) {
  return estimate(c, split_parameters(c), a, l, w);
}

Estimate estimate(const model::ModelConfig& c, const ParameterSplit& s, const Accelerator& a,
                  const Layout& l, const Workload& w) {
  Estimate e;
  e.layout = l;
  e.invalid = check_layout(c, l, w);
  if (!e.invalid.empty()) return e;
  const double chips = double(l.chips());
  const int64_t micro_batches = w.global_batch / (l.dp * l.micro_batch);
  const double tokens_per_micro_batch = double(l.micro_batch * w.seq_len);
  const double layers_per_chip = double(c.n_layer) / double(l.pp);

  // Memory: parameters split over tp x pp (experts also over ep), model state by ZeRO stage
  // over the ranks that replicate it, activations of the micro-batches in flight.
  const double dense_per_chip = s.dense / double(l.tp * l.pp);
  const double experts_per_chip = s.experts / double(l.tp * l.pp * l.ep);
  const dist::ZeroBytes dense =
      dist::zero_model_state(l.zero, model::Precision::kBf16, dense_per_chip, l.dp);
  const dist::ZeroBytes experts =
      dist::zero_model_state(l.zero, model::Precision::kBf16, experts_per_chip, l.dp / l.ep);
  e.memory.params = dense.params + experts.params;
  e.memory.grads = dense.grads + experts.grads;
  e.memory.optimizer = dense.optimizer + experts.optimizer;
  const double per_layer =
      double(model::saved_activation_bytes_per_layer(c, l.micro_batch * w.seq_len,
                                                     model::Precision::kBf16, l.recompute)) /
      double(l.tp);
  double in_flight = double(std::min<int64_t>(micro_batches, l.pp));
  if (l.vpp > 1) in_flight *= 1.0 + double(l.pp - 1) / double(l.pp * l.vpp);
  const double logits = tokens_per_micro_batch * double(c.vocab_size) * 4 / double(l.tp);
  e.memory.activations = per_layer * (layers_per_chip * in_flight + 1) + logits;
  e.usable_memory = kUsableHbm * a.hbm_bytes;
  e.fits = e.memory.total() <= e.usable_memory;

  // Compute: every chip runs its share of the step's FLOPs at the matmul efficiency of its
  // shapes; a pipeline idles (pp - 1) / (vpp x micro-batches) of that.
  e.flops = flops_per_token(c, s, w.seq_len, l.recompute);
  const double step_tokens = double(w.global_batch * w.seq_len);
  const MatmulEfficiency me = matmul_efficiency_of(a);
  const double width = std::min(double(c.d_model), double(c.ffn()) / double(l.tp));
  e.matmul_efficiency = me.peak_fraction * width / (width + me.half_width);
  e.time.compute =
      e.flops.hardware * step_tokens / chips / (a.peak_bf16_flops * e.matmul_efficiency);
  if (l.pp > 1) {
    e.time.bubble = e.time.compute * double(l.pp - 1) / double(l.vpp * micro_batches);
  }

  // Tensor (sequence) parallelism: per layer and micro-batch, forward and backward move the
  // equivalent of four all-reduces of the layer's activations (six when the forward is rerun).
  const double activation_bytes = tokens_per_micro_batch * double(c.d_model) * kBf16;
  const double tp_passes = l.recompute == Recompute::kFull ? 6 : 4;
  const int64_t domain = a.scaleup_domain;
  e.time.tensor_parallel = double(micro_batches) * layers_per_chip * tp_passes *
                           collective_seconds(activation_bytes, l.tp, domain, 2, a);
  // Pipeline: each micro-batch crosses every stage boundary forward and back.
  if (l.pp > 1) {
    const double crossing = activation_bytes / double(l.tp);
    const bool inside = l.chips() <= domain;
    e.time.pipeline_p2p = 2.0 * double(micro_batches * l.vpp) * crossing /
                          (inside ? a.scaleup_bandwidth : a.scaleout_bandwidth);
  }
  // Experts: two all-to-alls forward and two backward per MoE layer and micro-batch.
  if (l.ep > 1) {
    const double routed = activation_bytes * double(c.moe.top_k) / double(l.tp);
    const int64_t per_domain = std::max<int64_t>(1, domain / l.tp);
    const double bw = l.ep <= per_domain ? a.scaleup_bandwidth : a.scaleout_bandwidth;
    e.time.expert_all_to_all =
        double(micro_batches) * layers_per_chip * 4 * routed * double(l.ep - 1) / double(l.ep) / bw;
  }
  // Data parallelism: gradients (bf16) reduced once per step at ZeRO 0 and 1, reduce-scattered
  // every micro-step at 2 and 3, plus the parameter all-gather after the update (1, 2) or before
  // every forward and backward (3).
  const int64_t dp_per_domain = std::max<int64_t>(1, domain / l.tp);
  auto dp_seconds = [&](double params, int64_t ranks) {
    const double bytes = params * kBf16;
    const double m = double(micro_batches);
    switch (l.zero) {
      case 0:
        return collective_seconds(bytes, ranks, dp_per_domain, 2, a);
      case 1:
        return collective_seconds(bytes, ranks, dp_per_domain, 3, a);
      case 2:
        return collective_seconds(bytes, ranks, dp_per_domain, m + 1, a);
      default:
        return collective_seconds(bytes, ranks, dp_per_domain, 3 * m, a);
    }
  };
  const double dp_time =
      dp_seconds(dense_per_chip, l.dp) + dp_seconds(experts_per_chip, l.dp / l.ep);
  // The bucketed all-reduce of ZeRO 0 and 1 hides behind the last micro-batch's backward.
  const double last_backward = (e.time.compute / double(micro_batches)) * 2.0 / 3.0;
  e.time.data_parallel = l.zero <= 1 ? std::max(0.0, dp_time - last_backward) : dp_time;
  // AdamW reads and writes the master weights and both moments and writes bf16 parameters.
  const double optimizer_params = e.memory.optimizer / 12;
  e.time.optimizer = optimizer_params * 28 / a.hbm_bandwidth;

  const double step = e.time.total();
  e.tokens_per_s = step_tokens / step;
  e.model_tflops_per_chip = e.flops.model * e.tokens_per_s / chips / 1e12;
  e.hardware_tflops_per_chip = e.flops.hardware * e.tokens_per_s / chips / 1e12;
  e.mfu = e.model_tflops_per_chip * 1e12 / a.peak_bf16_flops;
  e.hfu = e.hardware_tflops_per_chip * 1e12 / a.peak_bf16_flops;
  e.days = w.tokens / e.tokens_per_s / 86400;
  const double chip_hours = chips * e.days * 24;
  auto cost = [&](const std::optional<double>& price) -> std::optional<double> {
    if (!price) return std::nullopt;
    return *price * chip_hours;
  };
  e.cost_on_demand = cost(a.prices.on_demand);
  e.cost_spot = cost(a.prices.spot);
  e.cost_1y = cost(a.prices.committed_1y);
  e.cost_3y = cost(a.prices.committed_3y);
  return e;
}

}  // namespace tessera::plan
