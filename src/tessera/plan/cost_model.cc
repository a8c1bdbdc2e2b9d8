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

// A run cannot fill all of HBM: the allocator, communication buffers and workspace take some.
constexpr double kUsableHbm = 0.92;
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
    it->second = {double(layout.experts_begin),
                  double(layout.params.total() - layout.experts_begin)};
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
                                   .batch_ranks = l.dp},
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

Estimate estimate(PlannedModel& planned, const Accelerator& a, const Layout& l, const Workload& w) {
  const model::ModelConfig& c = planned.config();
  Estimate e;
  e.layout = l;
  e.invalid = check_layout(c, l, w);
  if (!e.invalid.empty()) return e;
  const double chips = double(l.chips());
  const int64_t micro_batches = w.global_batch / (l.dp * l.micro_batch);
  const double tokens_per_micro_batch = double(l.micro_batch * w.seq_len / l.cp);  // per chip

  // Memory: what the engine holds on each pipeline rank (its stages of the engine's split, the
  // micro-batches its schedule keeps in flight), on tp rank 0 and ep rank 0; the fullest counts.
  const ChipParameters held = planned.parameters(l.tp, l.ep);
  const double dense_per_chip = held.dense / double(l.pp);
  const double experts_per_chip = held.experts / double(l.pp);
  const PipelineCost pipeline = pipeline_cost(l.pp, l.vpp, micro_batches);
  const std::vector<int64_t> boundaries =
      parallel::stage_boundaries(parallel::stage_blocks(c, l.pp * l.vpp, {}));
  const parallel::TrainingShape shape = training_shape(l, w);
  // The share of blocks that recompute (rf); the rest keep everything, their activations and
  // FLOPs those of recompute = none, as Megatron-LM's --recompute-num-layers leaves them.
  const double recomputed = l.recompute == Recompute::kNone ? 0 : l.recompute_fraction;
  const double fully_recomputed = l.recompute == Recompute::kFull ? recomputed : 0;
  parallel::TrainingShape keeping = shape;
  keeping.activations.recompute = Recompute::kNone;
  // The engine's split, even or not (70 layers on 12 stages): the rank with the most blocks
  // paces the pipeline.
  int64_t busiest_blocks = 0;
  for (int64_t r = 0; r < l.pp; ++r) {
    const parallel::RankWork work = parallel::rank_work({.tp = l.tp, .ep = l.ep}, boundaries, l.pp,
                                                        r, pipeline.stage_peak_in_flight);
    int64_t blocks = 0;
    for (const model::Sharding& stage : work.stages) blocks += stage.block_end - stage.block_begin;
    busiest_blocks = std::max(busiest_blocks, blocks);
    parallel::RankMemory m = planned.memory().rank(work, shape);
    if (recomputed < 1) {
      m.activations = recomputed * m.activations +
                      (1 - recomputed) * planned.memory().rank(work, keeping).activations;
    }
    if (m.total() > e.memory.total()) e.memory = m;
  }
  const double layers_per_chip = double(busiest_blocks);
  const double imbalance = layers_per_chip / (double(c.n_layer) / double(l.pp));
  e.usable_memory = kUsableHbm * a.hbm_bytes;
  e.fits = e.memory.total() <= e.usable_memory;

  // Compute: every chip runs its share of the step's FLOPs at the matmul efficiency of its
  // shapes; a pipeline idles what its schedule's simulation says ((pp - 1) / (vpp x micro-batches)
  // of that).
  e.flops = model::flops_per_token(c, planned.weights(), w.seq_len, l.recompute);
  if (recomputed < 1) {
    const double kept =
        model::flops_per_token(c, planned.weights(), w.seq_len, Recompute::kNone).hardware;
    e.flops.hardware = recomputed * e.flops.hardware + (1 - recomputed) * kept;
  }
  const double step_tokens = double(w.global_batch * w.seq_len);
  const double width = std::min(double(c.d_model), double(c.ffn()) / double(l.tp));
  e.matmul_efficiency = a.matmul.at_width(width);
  e.time.compute = imbalance * e.flops.hardware * step_tokens / chips /
                   (a.peak_bf16_flops * e.matmul_efficiency);
  if (!w.flash_attention) {
    // Unfused attention moves each 2-byte score through HBM: 13 bytes forward (the scores
    // written, the fused scale-mask-softmax and the dropout each reading and writing them, the
    // mask, the product with V reading them), 17 backward, 13 more where the forward is rerun.
    // Every token of a sequence has seq_len scores per head, causal or not.
    const double bytes_per_score = 30 + 13 * recomputed;
    const double scores = step_tokens / double(l.dp * l.cp) * double(w.seq_len) *
                          double(c.n_head / l.tp) * layers_per_chip;
    e.time.compute += scores * bytes_per_score / a.hbm_bandwidth;
  }
  e.time.bubble = e.time.compute * pipeline.bubble;

  // Tensor (sequence) parallelism: per layer and micro-batch, forward and backward move the
  // equivalent of four all-reduces of the layer's activations (six when the forward is rerun).
  const double activation_element = w.precision == model::Precision::kF32 ? 4 : 2;
  const double activation_bytes = tokens_per_micro_batch * double(c.d_model) * activation_element;
  const double tp_calls = double(micro_batches) * layers_per_chip * (4 + 2 * fully_recomputed);
  const int64_t domain = a.scaleup_domain;
  e.communication.tensor_parallel = collective_time({.kind = CollectiveKind::kAllReduce,
                                                     .bytes = tp_calls * activation_bytes,
                                                     .messages = tp_calls,
                                                     .ranks = l.tp,
                                                     .per_domain = domain},
                                                    a)
                                        .seconds;
  e.time.tensor_parallel = e.communication.tensor_parallel;
  // Pipeline: each micro-batch crosses every stage boundary forward and back.
  if (l.pp > 1) {
    const double crossing = activation_bytes / double(l.tp);
    const bool inside = l.chips() <= domain;
    const double step = inside ? a.latency.scaleup_step : a.latency.scaleout_step;
    e.communication.pipeline_p2p =
        2.0 * double(micro_batches * l.vpp) *
        (step + crossing / (inside ? a.scaleup_bandwidth : a.scaleout_bandwidth));
    e.time.pipeline_p2p = e.communication.pipeline_p2p;
  }
  // Context parallelism: per layer and micro-batch the ranks of a sequence gather its keys and
  // values for the forward and again for the backward, and reduce-scatter their gradients (one
  // more gather where the forward is rerun); counted whole, not hidden behind attention.
  if (l.cp > 1) {
    const double kv_bytes = tokens_per_micro_batch * double(l.cp) * 2.0 *
                            double(c.kv_heads() * c.head_dim()) / double(l.tp) * activation_element;
    const double calls = double(micro_batches) * layers_per_chip;
    const int64_t per_domain = std::max<int64_t>(1, domain / l.tp);
    const auto ring = [&](CollectiveKind kind, double passes) {
      return collective_time({.kind = kind,
                              .bytes = passes * calls * kv_bytes,
                              .messages = passes * calls,
                              .ranks = l.cp,
                              .per_domain = per_domain},
                             a)
          .seconds;
    };
    e.communication.context_parallel = ring(CollectiveKind::kAllGather, 2 + fully_recomputed) +
                                       ring(CollectiveKind::kReduceScatter, 1);
    e.time.context_parallel = e.communication.context_parallel;
  }
  // Experts: two all-to-alls forward and two backward per MoE layer and micro-batch.
  if (l.ep > 1) {
    const double routed = activation_bytes * double(c.moe.top_k) / double(l.tp);
    const int64_t per_domain = std::max<int64_t>(1, domain / l.tp);
    const bool inside = l.ep <= per_domain;
    const double bw = inside ? a.scaleup_bandwidth : a.scaleout_bandwidth;
    const double step = inside ? a.latency.scaleup_step : a.latency.scaleout_step;
    e.communication.expert_all_to_all =
        double(micro_batches) * layers_per_chip * 4 *
        (a.latency.start + step + routed * double(l.ep - 1) / double(l.ep) / bw);
    e.time.expert_all_to_all = e.communication.expert_all_to_all;
  }
  // Data parallelism: gradients (in the precision's gradient type) all-reduced once per step in
  // buckets at ZeRO 0 and 1, reduce-scattered block by block on every micro-step at 2 and 3; the
  // parameters all-gathered block by block after the update (1, 2) or before every forward and
  // backward (3).
  const int64_t dp_per_domain = std::max<int64_t>(1, domain / l.tp);
  const double gradient_element = parallel::zero_model_state(0, w.precision, 1, 1).grads;
  const double m = double(micro_batches);
  auto dp_seconds = [&](double params, int64_t ranks) {
    const double bytes = params * gradient_element;
    auto run = [&](CollectiveKind kind, double passes, double messages) {
      const Collective each{.kind = kind,
                            .bytes = bytes,
                            .messages = messages,
                            .ranks = ranks,
                            .per_domain = dp_per_domain};
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
               run(CollectiveKind::kAllGather, 1, layers_per_chip);
      case 2:
        return run(CollectiveKind::kReduceScatter, m, layers_per_chip) +
               run(CollectiveKind::kAllGather, 1, layers_per_chip);
      default:
        if (w.gather_per_tensor) {
          const double gathers = 2 + recomputed;
          return run(CollectiveKind::kReduceScatter, m, layers_per_chip) +
                 run(CollectiveKind::kAllGather, gathers * m,
                     layers_per_chip * planned.tensors_per_block());
        }
        return run(CollectiveKind::kReduceScatter, m, layers_per_chip) +
               run(CollectiveKind::kAllGather, 2 * m, layers_per_chip);
    }
  };
  e.communication.data_parallel =
      dp_seconds(dense_per_chip, l.dp * l.cp) + dp_seconds(experts_per_chip, l.dp * l.cp / l.ep);
  // The bucketed all-reduce of ZeRO 0 and 1 hides behind the last micro-batch's backward.
  const double last_backward = (e.time.compute / double(micro_batches)) * 2.0 / 3.0;
  if (l.zero <= 1) {
    e.time.data_parallel = std::max(0.0, e.communication.data_parallel - last_backward);
  } else {
    e.time.data_parallel = w.overlapped_sharding
                               ? std::max(0.0, e.communication.data_parallel - e.time.compute)
                               : e.communication.data_parallel;
  }
  // AdamW reads and writes the master weights and both moments and writes bf16 parameters.
  const double optimizer_params =
      e.memory.optimizer / parallel::zero_model_state(0, w.precision, 1, 1).optimizer;
  e.time.optimizer = optimizer_params * 28 / a.hbm_bandwidth;

  const double step = e.time.total();
  e.tokens_per_s = step_tokens / step;
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
  return e;
}

}  // namespace tessera::plan
