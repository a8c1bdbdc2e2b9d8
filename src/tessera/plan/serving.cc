#include "tessera/plan/serving.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/block.h"
#include "tessera/model/model_layout.h"
#include "tessera/plan/collectives.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/report.h"

namespace tessera::plan {
namespace {

constexpr double kActivationBytes = sizeof(float);  // the engine's residual stream is f32

model::Sharding stage_sharding(const model::ModelConfig& config, int64_t tp, int64_t pp,
                               int64_t stage) {
  return {.tp = tp,
          .tp_rank = 0,
          .block_begin = stage * config.n_layer / pp,
          .block_end = (stage + 1) * config.n_layer / pp};
}

// The memory of the chip holding `layout`, as serving_memory says.
ServingMemory memory_of(const model::ModelConfig& config, const model::ModelLayout& layout,
                        const ServingWorkload& w, int attention_threads, double usable_bytes) {
  model::ActivationOptions o;
  o.max_batch = model::inference_max_batch(config, w.max_step_tokens);
  o.max_seq = config.max_seq;
  o.training = false;
  o.precision = w.precision;
  o.weights = w.weights;
  o.threads = attention_threads;
  ServingMemory m;
  m.weights = double(model::resident_weight_bytes(layout, w.precision, w.weights));
  m.activations = double(model::activation_bytes(config, layout, o).total);
  m.kv_per_token = double(model::kv_rows(layout).bytes_per_token(w.kv_dtype));
  m.usable = usable_bytes;
  return m;
}

// What one pipeline stage holds and does per token.
struct Stage {
  int64_t count = 1;  // stages alike
  ServingMemory memory;
  model::MatmulWeightReads reads;          // bytes, in the served format
  double weights_per_token = 0;            // matrix elements each token multiplies by
  double layers = 0, attention_width = 0;  // blocks; query heads x head size on this chip
};

Stage plan_stage(const model::ModelConfig& config, int64_t tp, int64_t pp, int64_t stage,
                 const ServingWorkload& w, double usable) {
  const model::ModelLayout layout =
      model::model_layout(config, stage_sharding(config, tp, pp, stage));
  const model::BlockWidths widths(layout.spec.block, layout.sharding);
  Stage s;
  s.memory = memory_of(config, layout, w, 1, usable);
  s.reads = model::matmul_weight_reads(layout, w.precision, w.weights);
  // In f32 every matrix is read at four bytes an element.
  s.weights_per_token =
      model::matmul_weight_reads(layout, model::Precision::kF32, model::WeightFormat::kDense)
          .per_token() /
      4;
  s.layers = double(layout.blocks.size());
  s.attention_width = double(widths.heads * widths.head_dim);
  return s;
}

// One step of a stage over `tokens` new tokens (a decode step: one per sequence) whose
// sequences hold `context` cached tokens each on average.
struct StageStep {
  double read = 0, compute = 0, tensor_parallel = 0;
  double total() const { return std::max(read, compute) + tensor_parallel; }
};

StageStep stage_step(const Stage& s, const model::ModelConfig& config, const Accelerator& a,
                     int64_t tp, double tokens, double context, double weight_reads) {
  StageStep t;
  t.read = (weight_reads + tokens * context * s.memory.kv_per_token) / a.hbm_bandwidth;
  const double flops =
      2 * tokens * s.weights_per_token + 4 * tokens * context * s.layers * s.attention_width;
  const double width = std::min(double(config.d_model), double(config.ffn()) / double(tp));
  t.compute = flops / (a.peak_bf16_flops * a.matmul.at_width(width));
  if (tp > 1) {
    // Attention's output projection and the MLP's second matrix each end in an all-reduce.
    t.tensor_parallel =
        collective_time({.kind = CollectiveKind::kAllReduce,
                         .bytes = 2 * s.layers * tokens * double(config.d_model) * kActivationBytes,
                         .messages = 2 * s.layers,
                         .ranks = tp,
                         .per_domain = tp},
                        a)
            .seconds;
  }
  return t;
}

// Sending `tokens` rows of the residual stream from each stage to the next.
double pipeline_sends(const model::ModelConfig& config, const Accelerator& a, int64_t pp,
                      double tokens) {
  const double bytes = tokens * double(config.d_model) * kActivationBytes;
  return double(pp - 1) * (a.latency.start + bytes / a.scaleup_bandwidth);
}

// Why tp x pp cannot split the model on this accelerator; empty when it can.
std::string layout_problem(const model::ModelConfig& config, const Accelerator& a, int64_t tp,
                           int64_t pp) {
  try {
    model::check_sharding(config, tp, 1);
  } catch (const Error& error) {
    return error.what();
  }
  if (tp > a.scaleup_domain) {
    return fmt::format("tp={} spans more than the {} chips of a scale-up domain", tp,
                       a.scaleup_domain);
  }
  if (pp > config.n_layer) return fmt::format("pp={} exceeds the {} layers", pp, config.n_layer);
  return "";
}

// The first and last stages hold the embedding and the head; the stages between are alike.
std::vector<Stage> plan_stages(const model::ModelConfig& config, int64_t tp, int64_t pp,
                               const ServingWorkload& w, double usable) {
  std::vector<Stage> stages = {plan_stage(config, tp, pp, 0, w, usable)};
  if (pp > 1) stages.push_back(plan_stage(config, tp, pp, pp - 1, w, usable));
  if (pp > 2) {
    stages.push_back(plan_stage(config, tp, pp, 1, w, usable));
    stages.back().count = pp - 2;
  }
  return stages;
}

// Seconds between two tokens of a replica decoding `batch` sequences: the batch runs in pp
// groups, each at its own stage, so a token takes pp steps of the slowest stage, whose step
// lands in `busiest`.
double decode_seconds(const std::vector<Stage>& stages, const model::ModelConfig& config,
                      const Accelerator& a, int64_t tp, int64_t pp, int64_t batch,
                      const ServingWorkload& w, StageStep& busiest) {
  const double average_context = double(w.prompt_tokens) + double(w.output_tokens) / 2;
  const double group = std::ceil(double(batch) / double(pp));
  double slowest = 0;
  for (const Stage& s : stages) {
    const StageStep t =
        stage_step(s, config, a, tp, group, average_context, s.reads.per_step(group));
    if (t.total() > slowest) slowest = t.total(), busiest = t;
  }
  return double(pp) * slowest + pipeline_sends(config, a, pp, group);
}

// An idle replica's prefill of one prompt: every stage in turn, in chunks of max_step_tokens
// that each read the weights.
double prefill_seconds(const std::vector<Stage>& stages, const model::ModelConfig& config,
                       const Accelerator& a, int64_t tp, int64_t pp, const ServingWorkload& w) {
  const double prompt = double(w.prompt_tokens);
  const double chunks = std::ceil(prompt / double(w.max_step_tokens));
  const double chunk = std::min(prompt, double(w.max_step_tokens));
  double seconds = pipeline_sends(config, a, pp, prompt);
  for (const Stage& s : stages) {
    const StageStep t =
        stage_step(s, config, a, tp, prompt, prompt / 2, chunks * s.reads.per_step(chunk));
    seconds += double(s.count) * t.total();
  }
  return seconds;
}

std::optional<double> per_million(const std::optional<double>& usd_per_chip_hour, double chips,
                                  double tokens_per_s) {
  if (!usd_per_chip_hour || tokens_per_s <= 0) return std::nullopt;
  return *usd_per_chip_hour * chips / (3600 * tokens_per_s) * 1e6;
}

}  // namespace

ServingMemory serving_memory(const model::ModelConfig& config, int64_t tp, int64_t pp,
                             int64_t stage, const ServingWorkload& w, int attention_threads,
                             double usable_bytes) {
  return memory_of(config, model::model_layout(config, stage_sharding(config, tp, pp, stage)), w,
                   attention_threads, usable_bytes);
}

std::string ServingEstimate::layout() const {
  return fmt::format("tp={} pp={}{}", tp, pp, replicas > 1 ? fmt::format(" x {}", replicas) : "");
}

ServingEstimate estimate_serving(const model::ModelConfig& config, const Accelerator& a, int64_t tp,
                                 int64_t pp, int64_t replicas, const ServingWorkload& w) {
  check(w.context >= 1 && w.context <= config.max_seq,
        "tessera plan --serve: --seq-len (the context) must be in [1, model.max_seq = {}], got {}",
        config.max_seq, w.context);
  check(w.prompt_tokens >= 1 && w.prompt_tokens < w.context,
        "tessera plan --serve: --prompt-tokens must be in [1, --seq-len = {}), got {}", w.context,
        w.prompt_tokens);
  ServingEstimate e;
  e.tp = tp, e.pp = pp, e.replicas = std::max<int64_t>(replicas, 1);
  e.invalid = layout_problem(config, a, tp, pp);
  if (!e.invalid.empty()) return e;
  const double usable = kUsableHbm * a.hbm_bytes;
  const std::vector<Stage> stages = plan_stages(config, tp, pp, w, usable);
  const Stage* fullest = &stages.front();
  for (const Stage& s : stages) {
    if (s.memory.kv_tokens() < fullest->memory.kv_tokens()) fullest = &s;
  }
  e.memory = fullest->memory;
  e.sequences = e.memory.kv_tokens() / w.context;
  if (e.sequences < 1) {
    e.invalid = fmt::format(
        "one sequence of {} tokens does not fit: {} of weights and {} of activations leave {} of "
        "the {} usable for a KV cache of {} per token",
        w.context, human_bytes(e.memory.weights), human_bytes(e.memory.activations),
        human_bytes(std::max(0.0, e.memory.kv())), human_bytes(usable),
        human_bytes(e.memory.kv_per_token));
    return e;
  }

  // The largest batch that fits, or that keeps within the bound between tokens.
  StageStep busiest;
  for (int64_t batch = std::min(w.max_running, e.sequences); batch >= 1; --batch) {
    const double itl = decode_seconds(stages, config, a, tp, pp, batch, w, busiest);
    if (w.itl_bound_s > 0 && itl > w.itl_bound_s && batch > 1) continue;
    e.batch = batch, e.itl_s = itl;
    break;
  }
  e.read_s = busiest.read, e.compute_s = busiest.compute;
  e.tensor_parallel_s = busiest.tensor_parallel;
  e.ttft_s = prefill_seconds(stages, config, a, tp, pp, w);

  if (w.itl_bound_s > 0 && e.itl_s > w.itl_bound_s) {
    e.invalid = fmt::format("{:.1f} ms between tokens even for one sequence, above --itl-ms {:.1f}",
                            1e3 * e.itl_s, 1e3 * w.itl_bound_s);
  } else if (w.ttft_bound_s > 0 && e.ttft_s > w.ttft_bound_s) {
    e.invalid =
        fmt::format("{:.0f} ms to the first token of a {}-token prompt, above --ttft-ms {:.0f}",
                    1e3 * e.ttft_s, w.prompt_tokens, 1e3 * w.ttft_bound_s);
  }
  const double replica_tokens_per_s = double(e.batch) / e.itl_s;
  if (replicas == 0 && w.target_tokens_per_s > 0) {
    e.replicas = int64_t(std::ceil(w.target_tokens_per_s / replica_tokens_per_s));
  }
  e.tokens_per_s = double(e.replicas) * replica_tokens_per_s;
  const double chips = double(e.chips());
  e.usd_per_million_on_demand = per_million(a.prices.on_demand, chips, e.tokens_per_s);
  e.usd_per_million_spot = per_million(a.prices.spot, chips, e.tokens_per_s);
  e.usd_per_million_1y = per_million(a.prices.committed_1y, chips, e.tokens_per_s);
  e.usd_per_million_3y = per_million(a.prices.committed_3y, chips, e.tokens_per_s);
  return e;
}

ServingSearch search_serving(const model::ModelConfig& config, const Accelerator& a, int64_t chips,
                             const ServingWorkload& w) {
  ServingSearch found;
  for (int64_t tp = 1; tp <= std::min(config.n_head, a.scaleup_domain); ++tp) {
    if (config.n_head % tp != 0) continue;
    for (int64_t pp = 1; pp <= config.n_layer; ++pp) {
      if (config.n_layer % pp != 0) continue;
      if (chips > 0 && chips % (tp * pp) != 0) continue;
      const ServingEstimate e =
          estimate_serving(config, a, tp, pp, chips > 0 ? chips / (tp * pp) : 0, w);
      if (e.invalid.empty()) {
        found.ranked.push_back(e);
      } else if (e.memory.usable > 0 &&
                 (!found.best_misfit || e.memory.kv() > found.best_misfit->memory.kv())) {
        found.best_misfit = e;
      }
    }
  }
  std::sort(found.ranked.begin(), found.ranked.end(),
            [](const ServingEstimate& x, const ServingEstimate& y) {
              const double px = x.tokens_per_s / double(x.chips());
              const double py = y.tokens_per_s / double(y.chips());
              return px != py ? px > py : x.chips() < y.chips();
            });
  return found;
}

}  // namespace tessera::plan
