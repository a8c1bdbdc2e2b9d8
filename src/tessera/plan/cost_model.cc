#include "tessera/plan/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/model_layout.h"
#include "tessera/parallel/pipeline_simulator.h"
#include "tessera/parallel/pipeline_stages.h"
#include "tessera/parallel/zero_memory.h"
#include "tessera/plan/collectives.h"

namespace tessera::plan {

namespace {

using model::Recompute;

// An accelerator runs attention as one stream of work, so the scratch the engine keeps for each
// of its CPU threads counts once.
constexpr int kAttentionThreads = 1;

// What a layout's pipeline schedule (1F1B, or interleaved 1F1B with vpp > 1) costs, from the
// simulator: its idle time as a share of the step's compute, and the most micro-batches each
// (virtual) stage holds the activations of.
struct PipelineCost {
  double bubble = 0;
  std::vector<int> stage_peak_in_flight;  // [stage]
};

PipelineCost pipeline_cost(int64_t pp, int64_t vpp, int64_t micro_batches) {
  if (pp == 1) return {0, std::vector<int>(vpp, 1)};
  // Once the pipeline is full, a further micro-batch adds work and no idle time, so at most 2 pp
  // micro-batches (a multiple of pp, as interleaving needs) are simulated and the idle time is
  // set against the real count: tables of thousands of micro-batches stay out of the search.
  const int64_t simulated = std::min(micro_batches, 2 * pp);
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t>, parallel::PipelineSimulation> cache;
  std::lock_guard lock(mutex);
  auto [it, fresh] = cache.try_emplace({pp, vpp, simulated});
  if (fresh) {
    const auto kind =
        vpp > 1 ? comm::PipelineScheduleKind::kInterleaved1F1B : comm::PipelineScheduleKind::k1F1B;
    it->second = parallel::simulate_pipeline(
        parallel::make_pipeline_table(kind, int(pp), int(vpp), int(simulated)));
  }
  const parallel::PipelineSimulation& sim = it->second;
  const double idle = sim.makespan - sim.ideal;
  return {idle / (sim.ideal / double(simulated) * double(micro_batches)), sim.stage_peak_in_flight};
}

}  // namespace

PlannedModel::PlannedModel(const model::ModelConfig& config)
    : config_(config),
      weights_(model::matmul_weights(model::model_spec(config))),
      parameter_count_(double(model::count_parameters(config).total)),
      tensors_per_block_(0),
      memory_(config) {
  for (const model::Part& part : model::block_spec(config).parts) {
    tensors_per_block_ += part.bias ? 2 : 1;
  }
}

ChipParameters PlannedModel::parameters(int64_t tp, int64_t ep) {
  const auto [it, added] = parameters_.try_emplace({tp, ep});
  if (added) {
    const model::ModelLayout layout = model::model_layout(config_, {.tp = tp, .ep = ep});
    it->second = {double(layout.trained_dense()), double(layout.trained_experts())};
  }
  return it->second;
}

parallel::TrainingShape training_shape(const Layout& l, const Workload& w) {
  // Context parallelism splits each sequence, and shards ZeRO's state over its ranks too (as
  // Megatron-LM's distributed optimizer and FSDP over dp x cp do).
  return {int(l.zero), l.dp * l.cp,
          model::ActivationOptions{.max_batch = l.micro_batch,
                                   .max_seq = w.seq_len / l.cp,
                                   .training = true,
                                   .precision = w.precision,
                                   .recompute = l.recompute,
                                   .sequence_parallel = l.sequence_parallel,
                                   .threads = kAttentionThreads,
                                   .batch_ranks = l.dp,
                                   .context_ranks = l.cp},
          w.bf16_activations};
}

namespace {

// Parameters per gradient all-reduce bucket at ZeRO 0 and 1, as Megatron-LM sizes them
// (megatron/core/distributed: max(40M, 1M x dp)); the engine's dist.bucket_mb is sized for CPUs.
double bucket_parameters(int64_t dp) { return std::max(40e6, 1e6 * double(dp)); }

std::string check_layout(const model::ModelConfig& c, const Layout& l, const Workload& w) {
  if (c.n_head % l.tp != 0) return fmt::format("tp={} does not divide {} heads", l.tp, c.n_head);
  if (l.pp * l.vpp > c.n_layer) {
    return fmt::format("pp x vpp = {} stages exceed the {} layers: each stage needs one",
                       l.pp * l.vpp, c.n_layer);
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
  if (l.recompute_fraction < 1 && l.recompute == Recompute::kNone) {
    return fmt::format(
        "rf={:g} recomputes a share of the blocks: it needs recompute=selective or full",
        l.recompute_fraction);
  }
  if (l.cp > 1 && w.seq_len % (2 * l.cp) != 0) {
    return fmt::format(
        "cp={} splits each sequence into 2 x cp balanced chunks, which {} tokens do not divide",
        l.cp, w.seq_len);
  }
  const int64_t tokens = l.micro_batch * w.seq_len / l.cp;
  if (l.sequence_parallel && l.tp > 1 && tokens % l.tp != 0) {
    return fmt::format(
        "sp=1 splits a micro-batch's {} tokens over tp={}, which does not divide them", tokens,
        l.tp);
  }
  try {
    model::check_sharding(c, l.tp, l.ep);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

Estimate estimate(const model::ModelConfig& c, const Accelerator& a, const Layout& l,
                  const Workload& w) {
  PlannedModel planned(c);
  return estimate(planned, a, l, w);
}

namespace {

// What the parts of an estimate share about one layout's step.
struct LayoutStepShape {
  double chips;
  int64_t micro_batches;
  double tokens_per_micro_batch;  // per chip
  // The share of blocks that recompute (rf); the rest keep everything, their activations and
  // FLOPs those of recompute = none, as Megatron-LM's --recompute-num-layers leaves them.
  double recomputed, fully_recomputed;
  double layers_per_chip = 0;                   // on the busiest pipeline rank
  double activation_element, activation_bytes;  // one micro-batch's residual rows on a chip
};

// What the engine holds on each pipeline rank (its stages of the engine's split, the
// micro-batches its schedule keeps in flight), on tp rank 0 and ep rank 0; the fullest counts.
// Also finds the busiest rank's blocks: the engine's split, even or not (70 layers on 12 stages),
// and the rank with the most blocks paces the pipeline.
void estimate_memory(PlannedModel& planned, const Layout& l, const Workload& w,
                     const PipelineCost& pipeline, LayoutStepShape& s, Estimate& e) {
  const model::ModelConfig& c = planned.config();
  const std::vector<int64_t> boundaries =
      parallel::stage_boundaries(parallel::stage_blocks(c, l.pp * l.vpp, {}));
  const parallel::TrainingShape shape = training_shape(l, w);
  parallel::TrainingShape keeping = shape;
  keeping.activations.recompute = Recompute::kNone;
  int64_t busiest_blocks = 0;
  for (int64_t r = 0; r < l.pp; ++r) {
    const parallel::RankWork work = parallel::rank_work({.tp = l.tp, .ep = l.ep}, boundaries, l.pp,
                                                        r, pipeline.stage_peak_in_flight);
    int64_t blocks = 0;
    for (const model::Sharding& stage : work.stages) blocks += stage.block_end - stage.block_begin;
    busiest_blocks = std::max(busiest_blocks, blocks);
    parallel::RankMemory m = planned.memory().rank(work, shape);
    if (s.recomputed < 1) {
      m.activations = s.recomputed * m.activations +
                      (1 - s.recomputed) * planned.memory().rank(work, keeping).activations;
    }
    if (m.total() > e.memory.total()) e.memory = m;
  }
  s.layers_per_chip = double(busiest_blocks);
}

// Every chip runs its share of the step's FLOPs at the matmul efficiency of its shapes; a
// pipeline idles what its schedule's simulation says ((pp - 1) / (vpp x micro-batches) of that).
void estimate_compute(PlannedModel& planned, const Accelerator& a, const Layout& l,
                      const Workload& w, const PipelineCost& pipeline, const LayoutStepShape& s,
                      Estimate& e) {
  const model::ModelConfig& c = planned.config();
  const double imbalance = s.layers_per_chip / (double(c.n_layer) / double(l.pp));
  e.flops = model::flops_per_token(c, planned.weights(), w.seq_len, l.recompute);
  if (s.recomputed < 1) {
    const double kept =
        model::flops_per_token(c, planned.weights(), w.seq_len, Recompute::kNone).hardware;
    e.flops.hardware = s.recomputed * e.flops.hardware + (1 - s.recomputed) * kept;
  }
  const double step_tokens = double(w.global_batch * w.seq_len);
  const double width = std::min(double(c.d_model), double(c.ffn()) / double(l.tp));
  e.matmul_efficiency = a.matmul.at_width(width);
  e.time.compute = imbalance * e.flops.hardware * step_tokens / s.chips /
                   (a.peak_bf16_flops * e.matmul_efficiency);
  if (!w.flash_attention) {
    // Unfused attention moves each 2-byte score through HBM: 13 bytes forward (the scores
    // written, the fused scale-mask-softmax and the dropout each reading and writing them, the
    // mask, the product with V reading them), 17 backward, 13 more where the forward is rerun.
    // Every token of a sequence has seq_len scores per head, causal or not.
    const double bytes_per_score = 30 + 13 * s.recomputed;
    const double scores = step_tokens / double(l.dp * l.cp) * double(w.seq_len) *
                          double(c.n_head / l.tp) * s.layers_per_chip;
    e.time.compute += scores * bytes_per_score / a.hbm_bandwidth;
  }
  e.time.bubble = e.time.compute * pipeline.bubble;
}

// Tensor (sequence) parallelism: per layer and micro-batch, forward and backward move the
// equivalent of four all-reduces of the layer's activations (six when the forward is rerun).
// Pipeline: each micro-batch crosses every stage boundary forward and back.
void estimate_model_parallel(const Accelerator& a, const Layout& l, const LayoutStepShape& s,
                             Estimate& e) {
  const double tp_calls =
      double(s.micro_batches) * s.layers_per_chip * (4 + 2 * s.fully_recomputed);
  e.communication.tensor_parallel = collective_time({.kind = CollectiveKind::kAllReduce,
                                                     .bytes = tp_calls * s.activation_bytes,
                                                     .messages = tp_calls,
                                                     .ranks = l.tp,
                                                     .per_domain = a.scaleup_domain},
                                                    a)
                                        .seconds;
  e.time.tensor_parallel = e.communication.tensor_parallel;
  if (l.pp > 1) {
    const double crossing = s.activation_bytes / double(l.tp);
    const bool inside = l.chips() <= a.scaleup_domain;
    const double step = inside ? a.latency.scaleup_step : a.latency.scaleout_step;
    e.communication.pipeline_p2p =
        2.0 * double(s.micro_batches * l.vpp) *
        (step + crossing / (inside ? a.scaleup_bandwidth : a.scaleout_bandwidth));
    e.time.pipeline_p2p = e.communication.pipeline_p2p;
  }
}

// Context parallelism: per layer and micro-batch the ranks of a sequence gather its keys and
// values for the forward and again for the backward, and reduce-scatter their gradients (one
// more gather where the forward is rerun); counted whole, not hidden behind attention.
// Experts: two all-to-alls forward and two backward per MoE layer and micro-batch.
void estimate_sequence_and_experts(const model::ModelConfig& c, const Accelerator& a,
                                   const Layout& l, const LayoutStepShape& s, Estimate& e) {
  const int64_t per_domain = std::max<int64_t>(1, a.scaleup_domain / l.tp);
  const double calls = double(s.micro_batches) * s.layers_per_chip;
  if (l.cp > 1) {
    const double kv_bytes = s.tokens_per_micro_batch * double(l.cp) * 2.0 *
                            double(c.kv_heads() * c.head_dim()) / double(l.tp) *
                            s.activation_element;
    const auto ring = [&](CollectiveKind kind, double passes) {
      return collective_time({.kind = kind,
                              .bytes = passes * calls * kv_bytes,
                              .messages = passes * calls,
                              .ranks = l.cp,
                              .per_domain = per_domain},
                             a)
          .seconds;
    };
    e.communication.context_parallel = ring(CollectiveKind::kAllGather, 2 + s.fully_recomputed) +
                                       ring(CollectiveKind::kReduceScatter, 1);
    e.time.context_parallel = e.communication.context_parallel;
  }
  if (l.ep > 1) {
    const double routed = s.activation_bytes * double(c.moe.top_k) / double(l.tp);
    const bool inside = l.ep <= per_domain;
    const double bw = inside ? a.scaleup_bandwidth : a.scaleout_bandwidth;
    const double step = inside ? a.latency.scaleup_step : a.latency.scaleout_step;
    e.communication.expert_all_to_all =
        calls * 4 * (a.latency.start + step + routed * double(l.ep - 1) / double(l.ep) / bw);
    e.time.expert_all_to_all = e.communication.expert_all_to_all;
  }
}

// Data parallelism: gradients (in the precision's gradient type) all-reduced once per step in
// buckets at ZeRO 0 and 1, reduce-scattered block by block on every micro-step at 2 and 3; the
// parameters all-gathered block by block after the update (1, 2) or before every forward and
// backward (3). `params` of them over `ranks`.
double data_parallel_seconds(PlannedModel& planned, const Accelerator& a, const Layout& l,
                             const Workload& w, const LayoutStepShape& s, double params,
                             int64_t ranks, Estimate& e) {
  const double bytes = params * parallel::zero_model_state(0, w.precision, 1, 1).grads;
  const int64_t per_domain = std::max<int64_t>(1, a.scaleup_domain / l.tp);
  const double m = double(s.micro_batches), blocks = s.layers_per_chip;
  auto run = [&](CollectiveKind kind, double passes, double messages) {
    const Collective each{.kind = kind,
                          .bytes = bytes,
                          .messages = messages,
                          .ranks = ranks,
                          .per_domain = per_domain};
    const CollectiveTime t = collective_time(each, a);
    if (kind == CollectiveKind::kAllReduce) e.data_parallel_algorithm = t.algorithm;
    return passes * t.seconds;
  };
  const double buckets = std::ceil(params / bucket_parameters(ranks));
  switch (l.zero) {
    case 0:
      return run(CollectiveKind::kAllReduce, 1, buckets);
    case 1:
      return run(CollectiveKind::kAllReduce, 1, buckets) +
             run(CollectiveKind::kAllGather, 1, blocks);
    case 2:
      return run(CollectiveKind::kReduceScatter, m, blocks) +
             run(CollectiveKind::kAllGather, 1, blocks);
    default:
      if (w.gather_per_tensor) {
        return run(CollectiveKind::kReduceScatter, m, blocks) +
               run(CollectiveKind::kAllGather, (2 + s.recomputed) * m,
                   blocks * planned.tensors_per_block());
      }
      return run(CollectiveKind::kReduceScatter, m, blocks) +
             run(CollectiveKind::kAllGather, 2 * m, blocks);
  }
}

// The data-parallel time the step waits for, and the optimizer's: AdamW reads and writes the
// master weights and both moments and writes bf16 parameters.
void estimate_data_parallel(PlannedModel& planned, const Accelerator& a, const Layout& l,
                            const Workload& w, const LayoutStepShape& s, Estimate& e) {
  const ChipParameters held = planned.parameters(l.tp, l.ep);
  e.communication.data_parallel =
      data_parallel_seconds(planned, a, l, w, s, held.dense / double(l.pp), l.dp * l.cp, e) +
      data_parallel_seconds(planned, a, l, w, s, held.experts / double(l.pp), l.dp * l.cp / l.ep,
                            e);
  // The bucketed all-reduce of ZeRO 0 and 1 hides behind the last micro-batch's backward.
  const double last_backward = (e.time.compute / double(s.micro_batches)) * 2.0 / 3.0;
  if (l.zero <= 1) {
    e.time.data_parallel = std::max(0.0, e.communication.data_parallel - last_backward);
  } else {
    e.time.data_parallel = w.overlapped_sharding
                               ? std::max(0.0, e.communication.data_parallel - e.time.compute)
                               : e.communication.data_parallel;
  }
  const double optimizer_params =
      e.memory.optimizer / parallel::zero_model_state(0, w.precision, 1, 1).optimizer;
  e.time.optimizer = optimizer_params * 28 / a.hbm_bandwidth;
}

// Throughput, utilisation, days (with the expected goodput) and cost from the step's time.
void summarize(PlannedModel& planned, const Accelerator& a, const Layout& l, const Workload& w,
               double chips, Estimate& e) {
  e.tokens_per_s = double(w.global_batch * w.seq_len) / e.time.total();
  e.model_tflops_per_chip = e.flops.model * e.tokens_per_s / chips / 1e12;
  e.hardware_tflops_per_chip = e.flops.hardware * e.tokens_per_s / chips / 1e12;
  e.mfu = e.model_tflops_per_chip * 1e12 / a.peak_bf16_flops;
  e.hfu = e.hardware_tflops_per_chip * 1e12 / a.peak_bf16_flops;
  e.days_failure_free = w.tokens / e.tokens_per_s / 86400;
  const parallel::ZeroBytes state =
      parallel::zero_model_state(0, w.precision, planned.parameter_count(), 1);
  e.goodput = expected_goodput(state.params + state.optimizer, l.chips(), w.reliability);
  e.days = e.goodput.fraction > 0 ? e.days_failure_free / e.goodput.fraction
                                  : std::numeric_limits<double>::infinity();
  const double chip_hours = chips * e.days * 24;
  auto cost = [&](const std::optional<double>& price) -> std::optional<double> {
    if (!price) return std::nullopt;
    return *price * chip_hours;
  };
  e.cost_on_demand = cost(a.prices.on_demand);
  e.cost_spot = cost(a.prices.spot);
  e.cost_1y = cost(a.prices.committed_1y);
  e.cost_3y = cost(a.prices.committed_3y);
}

}  // namespace

Estimate estimate(PlannedModel& planned, const Accelerator& a, const Layout& l, const Workload& w) {
  const model::ModelConfig& c = planned.config();
  Estimate e;
  e.layout = l;
  e.invalid = check_layout(c, l, w);
  if (!e.invalid.empty()) return e;
  LayoutStepShape s;
  s.chips = double(l.chips());
  s.micro_batches = w.global_batch / (l.dp * l.micro_batch);
  s.tokens_per_micro_batch = double(l.micro_batch * w.seq_len / l.cp);
  s.recomputed = l.recompute == Recompute::kNone ? 0 : l.recompute_fraction;
  s.fully_recomputed = l.recompute == Recompute::kFull ? s.recomputed : 0;
  s.activation_element = w.precision == model::Precision::kF32 ? 4 : 2;
  s.activation_bytes = s.tokens_per_micro_batch * double(c.d_model) * s.activation_element;
  const PipelineCost pipeline = pipeline_cost(l.pp, l.vpp, s.micro_batches);
  estimate_memory(planned, l, w, pipeline, s, e);
  e.usable_memory = kUsableHbm * a.hbm_bytes;
  e.fits = e.memory.total() <= e.usable_memory;
  estimate_compute(planned, a, l, w, pipeline, s, e);
  estimate_model_parallel(a, l, s, e);
  estimate_sequence_and_experts(c, a, l, s, e);
  estimate_data_parallel(planned, a, l, w, s, e);
  summarize(planned, a, l, w, s.chips, e);
  return e;
}

}  // namespace tessera::plan
