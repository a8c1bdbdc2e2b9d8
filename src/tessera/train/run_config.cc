#include "tessera/train/run_config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <system_error>

#include "tessera/core/error.h"
#include "tessera/core/split_commas.h"
#include "tessera/model/model_config_keys.h"
#include "tessera/model/model_layout.h"
#include "tessera/parallel/pipeline_stages.h"

namespace tessera::train {
namespace {

// Why a Hugging Face model folder, which describes a model, sets none of a run's other keys.
constexpr std::string_view kRunOnly = "a run's setting: a Hugging Face folder describes a model";

// The comma-separated items of a list key's value ("" has none).
std::vector<std::string> list_items(const std::string& text) {
  return text.empty() ? std::vector<std::string>{} : split_commas(text);
}

std::vector<int64_t> int_list(const std::string& text, std::string_view key) {
  std::vector<int64_t> values;
  for (const std::string& item : list_items(text)) {
    int64_t value = 0;
    const auto [stop, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    check(error == std::errc() && stop == item.data() + item.size(),
          "{}: '{}' is not a whole number (the list is comma-separated, like 3,4,4,3)", key, item);
    values.push_back(value);
  }
  return values;
}

// "5,9-11" -> 5, 9, 10, 11.
std::vector<int64_t> step_list(const std::string& text, std::string_view key) {
  std::vector<int64_t> steps;
  for (const std::string& item : list_items(text)) {
    int64_t first = 0, last = 0;
    char dash = 0;
    const int fields = std::sscanf(item.c_str(), "%ld%c%ld", &first, &dash, &last);
    if (fields == 1) last = first;
    check((fields == 1 || (fields == 3 && dash == '-')) && first >= 1 && last >= first,
          "{}: '{}' is not a step or a range of steps like 9-11", key, item);
    for (int64_t s = first; s <= last; ++s) steps.push_back(s);
  }
  return steps;
}

// 5, 9, 10, 11 -> "5,9-11".
std::string step_list_text(const std::vector<int64_t>& steps) {
  std::string text;
  for (size_t i = 0; i < steps.size();) {
    size_t last = i;
    while (last + 1 < steps.size() && steps[last + 1] == steps[last] + 1) ++last;
    text += fmt::format("{}{}", text.empty() ? "" : ",", steps[i]);
    if (last > i) text += fmt::format("-{}", steps[last]);
    i = last + 1;
  }
  return text;
}

// obs.trace_steps: "first:last" (steps from 1, first <= last), or "" for none (0, -1).
void read_trace_steps(ObsConfig& obs, const std::string& text) {
  obs.trace_first = 0;
  obs.trace_last = -1;
  if (text.empty()) return;
  const size_t colon = text.find(':');
  const auto number = [&](std::string_view part, int64_t& out) {
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
    return ec == std::errc() && end == part.data() + part.size();
  };
  const std::string_view all = text;
  check(colon != std::string::npos && number(all.substr(0, colon), obs.trace_first) &&
            number(all.substr(colon + 1), obs.trace_last) && obs.trace_first >= 1 &&
            obs.trace_first <= obs.trace_last,
        "obs.trace_steps = '{}': give the first and last step to trace as first:last, steps from "
        "1 and first <= last (e.g. 10:12)",
        text);
}

Settings<TrainConfig> train_settings() {
  using T = TrainConfig;
  return {
      setting("train.batch_size", &T::batch_size,
              "sequences per micro-batch over all data-parallel ranks", at_least(1)),
      setting("train.seq_len", &T::seq_len, "tokens per training sequence; <= model.max_seq",
              at_least(1)),
      setting("train.steps", &T::steps, "optimizer steps to run", at_least(1)),
      setting("train.grad_accum", &T::grad_accum, "micro-batches accumulated per step",
              at_least(1)),
      setting("train.lr", &T::lr, "peak learning rate", above(0)),
      setting("train.min_lr", &T::min_lr, "learning rate at the end of cosine decay; <= train.lr",
              at_least(0)),
      setting("train.warmup_steps", &T::warmup_steps, "steps of linear learning-rate warmup",
              at_least(0)),
      setting("train.weight_decay", &T::weight_decay, "AdamW decoupled weight decay", at_least(0)),
      setting("train.beta1", &T::beta1, "AdamW first-moment decay", Range{0, 1, false, true}),
      setting("train.beta2", &T::beta2, "AdamW second-moment decay", Range{0, 1, false, true}),
      setting("train.eps", &T::eps, "AdamW denominator epsilon", above(0)),
      setting("train.grad_clip", &T::grad_clip, "max global gradient norm; 0 disables",
              at_least(0)),
      setting("train.precision", &T::precision,
              "matmul operands' precision; master weights stay f32"),
      setting("train.recompute", &T::recompute, "activation recomputation"),
      setting("train.document_mask", &T::document_mask,
              "attention stays inside each document of a packed sequence: a token after the "
              "dataset's end-of-text token starts a new one"),
      setting("train.zero", &T::zero,
              "ZeRO stage over the data-parallel ranks: 0 replicates everything, 1 shards the "
              "optimizer state, 2 also the gradients, 3 also the parameters",
              within(0, 3)),
      setting("train.loss_scale", &T::loss_scale, "f16: initial dynamic loss scale", at_least(1)),
      setting("train.loss_scale_growth_interval", &T::loss_scale_growth_interval,
              "f16: overflow-free steps before the loss scale doubles", at_least(1)),
      setting("train.seed", &T::seed, "seed for initialization and data order"),
      setting("train.device", &T::device,
              "where the model and its training state live (CUDA: each rank takes device "
              "local-rank mod the devices it sees)"),
      setting("train.threads", &T::threads, "CPU threads; 0 uses all cores", at_least(0)),
      setting("train.eval_every", &T::eval_every, "steps between validation runs; 0 disables",
              at_least(0)),
      setting("train.eval_batches", &T::eval_batches, "batches per validation run", at_least(1)),
      setting("train.log_every", &T::log_every, "steps between log lines", at_least(1)),
      setting("train.peak_flops", &T::peak_flops,
              "peak FLOP/s of one rank's device, which MFU divides by; 0 measures the CPU's at "
              "start-up or takes a CUDA device's dense peak from its name",
              at_least(0)),
  };
}

Settings<GuardConfig> guard_settings() {
  using G = GuardConfig;
  return {
      setting("train.max_bad_steps", &G::max_bad_steps,
              "skipped steps (non-finite loss or gradients, loss spikes) in a row before a "
              "rollback to the last checkpoint",
              at_least(1)),
      setting("train.max_rollbacks", &G::max_rollbacks,
              "rollbacks before a diverging run ends with an error", at_least(0)),
      setting("train.loss_spike_factor", &G::loss_spike_factor,
              "skip a step whose loss exceeds this multiple of its running mean; 0 disables"),
  };
}

Settings<DataConfig> data_settings() {
  using D = DataConfig;
  Setting<D> path = setting("data.path", &D::path,
                            "training data: a prepared dataset folder, or a text file or folder "
                            "of text files");
  Setting<D> tokenizer = setting("data.tokenizer", &D::tokenizer,
                                 "for text: \"byte\" (the default) or a tokenizer folder; a "
                                 "dataset brings its own");
  path.type = tokenizer.type = ConfigType::kPath;
  return {
      path,
      tokenizer,
      setting("data.val_fraction", &D::val_fraction, "fraction of text held out for eval",
              Range{0, 1, true, true}),
      setting("data.prefetch", &D::prefetch, "batches prepared ahead by a background thread",
              at_least(0)),
  };
}

Settings<comm::MeshShape> mesh_settings() {
  using M = comm::MeshShape;
  return {
      setting("mesh.dp", &M::dp, "data-parallel ranks", at_least(1)),
      setting("mesh.tp", &M::tp,
              "tensor-parallel ranks: each block's heads and MLP, and the vocabulary, split over "
              "them",
              at_least(1)),
      setting("mesh.pp", &M::pp,
              "pipeline-parallel ranks, each running its stages of the blocks (mesh.pp_layers) by "
              "mesh.pp_schedule; tessera train --dry-run plans a layout without the ranks",
              at_least(1)),
      setting("mesh.pp_virtual", &M::pp_virtual,
              "pipeline stages per pipeline rank: more than 1 interleaves them (mesh.pp_schedule "
              "= interleaved)",
              at_least(1)),
      setting("mesh.pp_schedule", &M::pp_schedule, "the pipeline schedule (zb-h1: zero-bubble)"),
      text_setting<M>(
          "mesh.pp_layers",
          "blocks per pipeline stage, first to last, comma-separated (mesh.pp x mesh.pp_virtual "
          "of them); empty: balanced, the first and last stages lighter",
          [](const M& m) { return fmt::format("{}", fmt::join(m.pp_layers, ",")); },
          [](M& m, const std::string& text) { m.pp_layers = int_list(text, "mesh.pp_layers"); }),
      setting("mesh.ep", &M::ep,
              "expert-parallel ranks, carved out of the data-parallel ones (must divide mesh.dp)",
              at_least(1)),
      setting("mesh.cp", &M::cp,
              "context-parallel ranks: each sequence split over them in 2 x mesh.cp chunks (an "
              "early and a late one each), attention gathering the whole sequences' keys and "
              "values",
              at_least(1)),
      setting("mesh.sequence_parallel", &M::sequence_parallel,
              "with mesh.tp > 1: norms and residual additions on 1/tp of the tokens each, "
              "all-gathers and reduce-scatters in place of all-reduces"),
  };
}

Settings<DistConfig> dist_settings() {
  using D = DistConfig;
  return {
      setting("dist.timeout_s", &D::timeout_s,
              "seconds one collective may wait before the job is ended as failed", above(0)),
      setting("dist.bucket_mb", &D::bucket_mb,
              "MiB of gradients per data-parallel all-reduce bucket", above(0)),
      setting("dist.elastic", &D::elastic,
              "a world of another size than the mesh changes mesh.dp to fit it (resuming on "
              "fewer or more ranks)"),
  };
}

Settings<CheckpointConfig> checkpoint_settings() {
  using C = CheckpointConfig;
  return {
      setting("checkpoint.every", &C::every, "steps between checkpoints; 0 = only at end",
              at_least(0)),
      setting("checkpoint.keep_last", &C::keep_last, "checkpoints kept on disk", at_least(1)),
      setting("checkpoint.async", &C::async,
              "write checkpoints in the background: the step waits only for a copy of the state"),
      setting("checkpoint.preempt_timeout_s", &C::preempt_timeout_s,
              "after SIGTERM, seconds to reach a step boundary and commit a checkpoint before "
              "exiting without one",
              above(0)),
  };
}

Settings<ObsConfig> obs_settings() {
  using O = ObsConfig;
  return {
      setting("obs.metrics_port", &O::metrics_port,
              "serve /metrics (Prometheus), /health and the live page on this port (0 picks a "
              "free one, -1 serves nothing); tessera train --metrics-port N sets it",
              within(-1, 65535)),
      setting("obs.metrics_host", &O::metrics_host, "the address the metrics port listens on"),
      setting("obs.metrics_all_ranks", &O::metrics_all_ranks,
              "every rank serves its own metrics, on obs.metrics_port + its rank (rank 0 alone "
              "when false)"),
      text_setting<O>(
          "obs.trace_steps",
          "first:last: a Chrome/Perfetto trace of these steps, per rank, in <out>/trace/",
          [](const O& o) {
            return o.tracing() ? fmt::format("{}:{}", o.trace_first, o.trace_last) : "";
          },
          read_trace_steps),
  };
}

Settings<FaultConfig> fault_settings() {
  return {
      text_setting<FaultConfig>(
          "fault.nan_gradient_steps",
          "testing: steps (\"5,9-11\") whose gradients are made NaN, once each",
          [](const FaultConfig& f) { return step_list_text(f.nan_gradient_steps); },
          [](FaultConfig& f, const std::string& text) {
            f.nan_gradient_steps = step_list(text, "fault.nan_gradient_steps");
          }),
  };
}

// The checks that span keys; each key's own range is its row's.
void check_lora(const RunConfig& run) {
  if (!run.model.lora.enabled()) {
    check(run.model.lora.quantize == model::FrozenWeights::kPrecision,
          "train.lora_quantize: only a LoRA run's frozen model is quantised; set train.lora_rank "
          "too, or train.lora_quantize = \"none\"");
    return;
  }
  model::lora_target_parts(run.model);  // names every target, or throws
  check(run.train.device == kernels::DeviceKind::kCpu,
        "train.lora_rank: adapters train on the CPU only for now; set train.device = \"cpu\"");
}

void check_across_keys(const RunConfig& run) {
  const model::ModelConfig& m = run.model;
  const TrainConfig& t = run.train;
  const comm::MeshShape& mesh = run.mesh;
  check_lora(run);
  check(t.seq_len <= m.max_seq, "train.seq_len ({}) exceeds model.max_seq ({})", t.seq_len,
        m.max_seq);
  check(t.min_lr <= t.lr, "train.min_lr ({}) must be in [0, train.lr ({})]", t.min_lr, t.lr);
  check(run.guard.loss_spike_factor == 0 || run.guard.loss_spike_factor > 1,
        "train.loss_spike_factor must be 0 (off) or > 1, got {}", run.guard.loss_spike_factor);
  check(mesh.pp > 1 || mesh.pp_virtual == 1,
        "mesh.pp_virtual = {} interleaves the stages of several pipeline ranks: it needs mesh.pp "
        "> 1",
        mesh.pp_virtual);
  // The split and the schedule's table are made here, so that every error they have is the
  // config's, before any rank starts.
  parallel::run_pipeline_table(m, mesh,
                               parallel::stage_boundaries(parallel::stage_blocks(
                                   m, mesh.pp * mesh.pp_virtual, mesh.pp_layers)),
                               t.grad_accum);
  check(mesh.dp % mesh.ep == 0,
        "mesh.ep = {} does not divide mesh.dp = {}: expert-parallel ranks are carved out of the "
        "data-parallel ones",
        mesh.ep, mesh.dp);
  check(t.batch_size % mesh.dp == 0,
        "train.batch_size ({}) must be divisible by mesh.dp ({}): each data-parallel rank takes an "
        "equal share of the global batch",
        t.batch_size, mesh.dp);
  model::check_sharding(m, mesh.tp, mesh.ep);
  check(t.seq_len % (2 * mesh.cp) == 0,
        "train.seq_len ({}) must be a multiple of 2 x mesh.cp = {}: context parallelism gives "
        "each rank two equal chunks of every sequence",
        t.seq_len, 2 * mesh.cp);
  check(mesh.cp == 1 || m.lora.dropout == 0,
        "mesh.cp = {} with train.lora_dropout = {} is not supported: dropout masks are drawn by "
        "row of a whole sequence; use mesh.cp = 1 or no dropout",
        mesh.cp, m.lora.dropout);
  check(mesh.cp == 1 || !m.is_moe(),
        "mesh.cp = {} with a mixture of experts (model.moe.n_experts = {}) is not supported: "
        "use mesh.cp = 1",
        mesh.cp, m.moe.n_experts);
  const int64_t micro_tokens = t.batch_size / mesh.dp * t.seq_len / mesh.cp;
  check(!mesh.sequence_parallel || micro_tokens % mesh.tp == 0,
        "mesh.sequence_parallel splits each rank's {} tokens per micro-batch (train.batch_size / "
        "mesh.dp x train.seq_len / mesh.cp) over mesh.tp = {} ranks: make them a multiple of it",
        micro_tokens, mesh.tp);
}

}  // namespace

const Settings<RunConfig>& run_settings() {
  static const Settings<RunConfig> rows = [] {
    Settings<RunConfig> run_only = join<RunConfig>({
        nest(&RunConfig::train, train_settings()),
        nest(&RunConfig::guard, guard_settings()),
        nest(&RunConfig::data, data_settings()),
        nest(&RunConfig::mesh, mesh_settings()),
        nest(&RunConfig::dist, dist_settings()),
        nest(&RunConfig::checkpoint, checkpoint_settings()),
        nest(&RunConfig::obs, obs_settings()),
        nest(&RunConfig::fault, fault_settings()),
    });
    for (Setting<RunConfig>& row : run_only) row.not_from_hf = kRunOnly;
    Settings<RunConfig> lora =
        nest(&RunConfig::model, nest(&model::ModelConfig::lora, model::lora_settings()));
    for (Setting<RunConfig>& row : lora) row.not_from_hf = kRunOnly;
    return join<RunConfig>({nest(&RunConfig::model, model::model_settings()), run_only, lora});
  }();
  return rows;
}

std::vector<ConfigKey> run_config_schema() { return config_schema(run_settings()); }

RunConfig run_config_from(const Config& config) {
  RunConfig run;
  read_settings(run_settings(), config, run);
  model::validate(run.model);
  check_across_keys(run);
  return run;
}

Config elastic_config(const Config& config, int world_size) {
  if (!config.get_bool("dist.elastic")) return config;
  const int64_t others =
      config.get_int("mesh.tp") * config.get_int("mesh.pp") * config.get_int("mesh.cp");
  const int64_t dp = config.get_int("mesh.dp");
  if (others < 1 || world_size % others != 0 || world_size / others == dp) return config;
  Config resized = config;
  resized.set("mesh.dp", int64_t(world_size / others));
  return resized;
}

}  // namespace tessera::train
