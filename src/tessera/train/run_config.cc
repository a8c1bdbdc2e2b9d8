#include "tessera/train/run_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>
#include <tuple>

#include "tessera/core/error.h"
#include "tessera/model/model_config_keys.h"
#include "tessera/model/model_layout.h"
#include "tessera/parallel/pipeline_stages.h"

namespace tessera::train {

std::vector<ConfigKey> run_config_schema() {
  using T = ConfigType;
  std::vector<ConfigKey> keys = model::model_config_schema();
  const std::vector<ConfigKey> run_keys = {
      {"train.batch_size", T::kInt, "16", false,
       "sequences per micro-batch over all data-parallel ranks"},
      {"train.seq_len", T::kInt, "256", false, "tokens per training sequence; <= model.max_seq"},
      {"train.steps", T::kInt, "600", false, "optimizer steps to run"},
      {"train.grad_accum", T::kInt, "1", false, "micro-batches accumulated per step"},
      {"train.lr", T::kFloat, "2e-3", false, "peak learning rate"},
      {"train.min_lr", T::kFloat, "2e-4", false, "learning rate at the end of cosine decay"},
      {"train.warmup_steps", T::kInt, "50", false, "steps of linear learning-rate warmup"},
      {"train.weight_decay", T::kFloat, "0.1", false, "AdamW decoupled weight decay"},
      {"train.beta1", T::kFloat, "0.9", false, "AdamW first-moment decay"},
      {"train.beta2", T::kFloat, "0.95", false, "AdamW second-moment decay"},
      {"train.eps", T::kFloat, "1e-8", false, "AdamW denominator epsilon"},
      {"train.grad_clip", T::kFloat, "1.0", false, "max global gradient norm; 0 disables"},
      {"train.precision", T::kString, "f32", false,
       "\"f32\", \"bf16\" or \"f16\" (matmul operands; master weights stay f32)"},
      {"train.recompute", T::kString, "none", false,
       "activation recomputation: \"none\", \"selective\" or \"full\""},
      {"train.zero", T::kInt, "0", false,
       "ZeRO stage over the data-parallel ranks: 0 replicates everything, 1 shards the optimizer "
       "state, 2 also the gradients, 3 also the parameters"},
      {"train.loss_scale", T::kFloat, "65536", false, "f16: initial dynamic loss scale"},
      {"train.loss_scale_growth_interval", T::kInt, "1000", false,
       "f16: overflow-free steps before the loss scale doubles"},
      {"train.seed", T::kInt, "1337", false, "seed for initialization and data order"},
      {"train.device", T::kString, "cpu", false,
       "\"cpu\" or \"cuda\": where the model and its training state live (CUDA: each rank takes "
       "device local-rank mod the devices it sees)"},
      {"train.threads", T::kInt, "0", false, "CPU threads; 0 uses all cores"},
      {"train.eval_every", T::kInt, "100", false, "steps between validation runs; 0 disables"},
      {"train.eval_batches", T::kInt, "8", false, "batches per validation run"},
      {"train.log_every", T::kInt, "10", false, "steps between log lines"},
      {"train.max_bad_steps", T::kInt, "3", false,
       "skipped steps (non-finite loss or gradients, loss spikes) in a row before a rollback to "
       "the last checkpoint"},
      {"train.max_rollbacks", T::kInt, "3", false,
       "rollbacks before a diverging run ends with an error"},
      {"train.loss_spike_factor", T::kFloat, "0", false,
       "skip a step whose loss exceeds this multiple of its running mean; 0 disables"},
      {"train.peak_flops", T::kFloat, "0", false,
       "peak FLOP/s of one rank's device, which MFU divides by; 0 measures the CPU's at start-up "
       "or takes a CUDA device's dense peak from its name"},
      {"data.path", T::kPath, "", false,
       "training data: a prepared dataset folder, or a text file or folder of text files"},
      {"data.tokenizer", T::kPath, "", false,
       "for text: \"byte\" (the default) or a tokenizer folder; a dataset brings its own"},
      {"data.val_fraction", T::kFloat, "0.1", false, "fraction of text held out for eval"},
      {"data.prefetch", T::kInt, "2", false, "batches prepared ahead by a background thread"},
      {"mesh.dp", T::kInt, "1", false, "data-parallel ranks"},
      {"mesh.tp", T::kInt, "1", false,
       "tensor-parallel ranks: each block's heads and MLP, and the vocabulary, split over them"},
      {"mesh.pp", T::kInt, "1", false,
       "pipeline-parallel ranks, each running its stages of the blocks (mesh.pp_layers) by "
       "mesh.pp_schedule; tessera train --dry-run plans a layout without the ranks"},
      {"mesh.pp_virtual", T::kInt, "1", false,
       "pipeline stages per pipeline rank: more than 1 interleaves them (mesh.pp_schedule = "
       "interleaved)"},
      {"mesh.pp_schedule", T::kString, "1f1b", false,
       "the pipeline schedule: gpipe, 1f1b, interleaved or zb-h1 (zero-bubble)"},
      {"mesh.pp_layers", T::kString, "", false,
       "blocks per pipeline stage, first to last, comma-separated (mesh.pp x mesh.pp_virtual of "
       "them); empty: balanced, the first and last stages lighter"},
      {"mesh.ep", T::kInt, "1", false,
       "expert-parallel ranks, carved out of the data-parallel ones (must divide mesh.dp)"},
      {"mesh.sequence_parallel", T::kBool, "false", false,
       "with mesh.tp > 1: norms and residual additions on 1/tp of the tokens each, all-gathers "
       "and reduce-scatters in place of all-reduces"},
      {"dist.timeout_s", T::kFloat, "300", false,
       "seconds one collective may wait before the job is ended as failed"},
      {"dist.bucket_mb", T::kFloat, "4", false,
       "MiB of gradients per data-parallel all-reduce bucket"},
      {"dist.elastic", T::kBool, "false", false,
       "a world of another size than the mesh changes mesh.dp to fit it (resuming on fewer or "
       "more ranks)"},
      {"checkpoint.every", T::kInt, "200", false, "steps between checkpoints; 0 = only at end"},
      {"checkpoint.keep_last", T::kInt, "2", false, "checkpoints kept on disk"},
      {"checkpoint.async", T::kBool, "true", false,
       "write checkpoints in the background: the step waits only for a copy of the state"},
      {"checkpoint.preempt_timeout_s", T::kFloat, "120", false,
       "after SIGTERM, seconds to reach a step boundary and commit a checkpoint before exiting "
       "without one"},
      {"obs.metrics_port", T::kInt, "-1", false,
       "serve /metrics (Prometheus), /health and the live page on this port (0 picks a free "
       "one, -1 serves nothing); tessera train --metrics-port N sets it"},
      {"obs.metrics_host", T::kString, "127.0.0.1", false,
       "the address the metrics port listens on"},
      {"obs.metrics_all_ranks", T::kBool, "false", false,
       "every rank serves its own metrics, on obs.metrics_port + its rank (rank 0 alone when "
       "false)"},
      {"obs.trace_steps", T::kString, "", false,
       "first:last: a Chrome/Perfetto trace of these steps, per rank, in <out>/trace/"},
      {"fault.nan_gradient_steps", T::kString, "", false,
       "testing: steps (\"5,9-11\") whose gradients are made NaN, once each"},
  };
  keys.insert(keys.end(), run_keys.begin(), run_keys.end());
  return keys;
}

namespace {

int64_t int_at_least(const Config& config, const char* key, int64_t min) {
  const int64_t v = config.get_int(key);
  check(v >= min, "{} must be >= {}, got {}", key, min, v);
  return v;
}

// The comma-separated items of a list key's value ("" has none).
std::vector<std::string> list_items(const Config& config, const char* key) {
  const std::string& text = config.get_string(key);
  std::vector<std::string> items;
  for (size_t at = 0; at < text.size();) {
    const size_t end = std::min(text.find(',', at), text.size());
    items.push_back(text.substr(at, end - at));
    at = end + 1;
  }
  return items;
}

// obs.trace_steps: "first:last" (steps from 1, first <= last), or "" for none (0, -1).
std::pair<int64_t, int64_t> trace_steps(const Config& config) {
  const std::string& text = config.get_string("obs.trace_steps");
  if (text.empty()) return {0, -1};
  const size_t colon = text.find(':');
  int64_t first = 0, last = 0;
  const auto number = [&](std::string_view part, int64_t& out) {
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), out);
    return ec == std::errc() && end == part.data() + part.size();
  };
  const std::string_view all = text;
  check(colon != std::string::npos && number(all.substr(0, colon), first) &&
            number(all.substr(colon + 1), last) && first >= 1 && first <= last,
        "obs.trace_steps = '{}': give the first and last step to trace as first:last, steps from "
        "1 and first <= last (e.g. 10:12)",
        text);
  return {first, last};
}

// "5,9-11" -> 5, 9, 10, 11.
std::vector<int64_t> step_list(const Config& config, const char* key) {
  std::vector<int64_t> steps;
  for (const std::string& item : list_items(config, key)) {
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

std::vector<int64_t> int_list(const Config& config, const char* key) {
  std::vector<int64_t> values;
  for (const std::string& item : list_items(config, key)) {
    int64_t value = 0;
    const auto [stop, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    check(error == std::errc() && stop == item.data() + item.size(),
          "{}: '{}' is not a whole number (the list is comma-separated, like 3,4,4,3)", key, item);
    values.push_back(value);
  }
  return values;
}

}  // namespace

RunConfig run_config_from(const Config& config) {
  RunConfig run;
  run.model = model::model_config_from(config);
  const model::ModelConfig& m = run.model;

  TrainConfig& t = run.train;
  t.batch_size = int_at_least(config, "train.batch_size", 1);
  t.seq_len = int_at_least(config, "train.seq_len", 1);
  check(t.seq_len <= m.max_seq, "train.seq_len ({}) exceeds model.max_seq ({})", t.seq_len,
        m.max_seq);
  t.steps = int_at_least(config, "train.steps", 1);
  t.grad_accum = int_at_least(config, "train.grad_accum", 1);
  t.lr = config.get_float("train.lr");
  check(t.lr > 0, "train.lr must be > 0, got {}", t.lr);
  t.min_lr = config.get_float("train.min_lr");
  check(t.min_lr >= 0 && t.min_lr <= t.lr, "train.min_lr ({}) must be in [0, train.lr ({})]",
        t.min_lr, t.lr);
  t.warmup_steps = int_at_least(config, "train.warmup_steps", 0);
  t.weight_decay = config.get_float("train.weight_decay");
  check(t.weight_decay >= 0, "train.weight_decay must be >= 0, got {}", t.weight_decay);
  t.beta1 = config.get_float("train.beta1");
  check(t.beta1 >= 0 && t.beta1 < 1, "train.beta1 must be in [0, 1), got {}", t.beta1);
  t.beta2 = config.get_float("train.beta2");
  check(t.beta2 >= 0 && t.beta2 < 1, "train.beta2 must be in [0, 1), got {}", t.beta2);
  t.eps = config.get_float("train.eps");
  check(t.eps > 0, "train.eps must be > 0, got {}", t.eps);
  t.grad_clip = config.get_float("train.grad_clip");
  check(t.grad_clip >= 0, "train.grad_clip must be >= 0 (0 disables), got {}", t.grad_clip);
  t.precision = model::precision_from_name(config.get_string("train.precision"));
  const std::string device = config.get_string("train.device");
  check(device == "cpu" || device == "cuda", "train.device must be \"cpu\" or \"cuda\", got \"{}\"",
        device);
  t.device = kernels::device_kind_from_name(device);
  t.recompute = model::recompute_from_name(config.get_string("train.recompute"));
  t.zero = int_at_least(config, "train.zero", 0);
  check(t.zero <= 3, "train.zero must be 0, 1, 2 or 3, got {}", t.zero);
  t.loss_scale = config.get_float("train.loss_scale");
  check(t.loss_scale >= 1, "train.loss_scale must be >= 1, got {}", t.loss_scale);
  t.loss_scale_growth_interval = int_at_least(config, "train.loss_scale_growth_interval", 1);
  t.seed = config.get_int("train.seed");
  t.threads = int_at_least(config, "train.threads", 0);
  t.eval_every = int_at_least(config, "train.eval_every", 0);
  t.eval_batches = int_at_least(config, "train.eval_batches", 1);
  t.log_every = int_at_least(config, "train.log_every", 1);

  run.data.path = config.get_string("data.path");
  run.data.val_fraction = config.get_float("data.val_fraction");
  check(run.data.val_fraction > 0 && run.data.val_fraction < 1,
        "data.val_fraction must be in (0, 1), got {}", run.data.val_fraction);
  run.data.tokenizer = config.get_string("data.tokenizer");
  run.data.prefetch = int_at_least(config, "data.prefetch", 0);

  run.mesh.dp = int_at_least(config, "mesh.dp", 1);
  run.mesh.tp = int_at_least(config, "mesh.tp", 1);
  run.mesh.pp = int_at_least(config, "mesh.pp", 1);
  run.mesh.ep = int_at_least(config, "mesh.ep", 1);
  run.mesh.sequence_parallel = config.get_bool("mesh.sequence_parallel");
  run.mesh.pp_virtual = int_at_least(config, "mesh.pp_virtual", 1);
  run.mesh.pp_schedule = comm::parse_pipeline_schedule(config.get_string("mesh.pp_schedule"));
  run.mesh.pp_layers = int_list(config, "mesh.pp_layers");
  check(
      run.mesh.pp > 1 || run.mesh.pp_virtual == 1,
      "mesh.pp_virtual = {} interleaves the stages of several pipeline ranks: it needs mesh.pp > 1",
      run.mesh.pp_virtual);
  // The split and the schedule's table are made here, so that every error they have is the
  // config's, before any rank starts.
  parallel::run_pipeline_table(m, run.mesh,
                               parallel::stage_boundaries(parallel::stage_blocks(
                                   m, run.mesh.pp * run.mesh.pp_virtual, run.mesh.pp_layers)),
                               t.grad_accum);
  check(run.mesh.dp % run.mesh.ep == 0,
        "mesh.ep = {} does not divide mesh.dp = {}: expert-parallel ranks are carved out of the "
        "data-parallel ones",
        run.mesh.ep, run.mesh.dp);
  check(t.batch_size % run.mesh.dp == 0,
        "train.batch_size ({}) must be divisible by mesh.dp ({}): each data-parallel rank takes an "
        "equal share of the global batch",
        t.batch_size, run.mesh.dp);
  model::check_sharding(m, run.mesh.tp, run.mesh.ep);
  const int64_t micro_tokens = t.batch_size / run.mesh.dp * t.seq_len;
  check(!run.mesh.sequence_parallel || micro_tokens % run.mesh.tp == 0,
        "mesh.sequence_parallel splits each rank's {} tokens per micro-batch (train.batch_size / "
        "mesh.dp x train.seq_len) over mesh.tp = {} ranks: make them a multiple of it",
        micro_tokens, run.mesh.tp);
  run.dist.timeout_s = config.get_float("dist.timeout_s");
  check(run.dist.timeout_s > 0, "dist.timeout_s must be > 0, got {}", run.dist.timeout_s);
  run.dist.bucket_mb = config.get_float("dist.bucket_mb");
  check(run.dist.bucket_mb > 0, "dist.bucket_mb must be > 0, got {}", run.dist.bucket_mb);

  run.dist.elastic = config.get_bool("dist.elastic");

  run.checkpoint.every = int_at_least(config, "checkpoint.every", 0);
  run.checkpoint.keep_last = int_at_least(config, "checkpoint.keep_last", 1);
  run.checkpoint.async = config.get_bool("checkpoint.async");
  run.checkpoint.preempt_timeout_s = config.get_float("checkpoint.preempt_timeout_s");
  check(run.checkpoint.preempt_timeout_s > 0, "checkpoint.preempt_timeout_s must be > 0, got {}",
        run.checkpoint.preempt_timeout_s);

  run.guard.max_bad_steps = int_at_least(config, "train.max_bad_steps", 1);
  run.guard.max_rollbacks = int_at_least(config, "train.max_rollbacks", 0);
  run.guard.loss_spike_factor = config.get_float("train.loss_spike_factor");
  check(run.guard.loss_spike_factor == 0 || run.guard.loss_spike_factor > 1,
        "train.loss_spike_factor must be 0 (off) or > 1, got {}", run.guard.loss_spike_factor);
  t.peak_flops = config.get_float("train.peak_flops");
  check(std::isfinite(t.peak_flops) && t.peak_flops >= 0,
        "train.peak_flops must be >= 0 FLOP/s (0 measures the CPU), got {}", t.peak_flops);

  run.obs.metrics_port = config.get_int("obs.metrics_port");
  check(run.obs.metrics_port >= -1 && run.obs.metrics_port <= 65535,
        "obs.metrics_port must be a TCP port (0 picks a free one) or -1 for none, got {}",
        run.obs.metrics_port);
  run.obs.metrics_host = config.get_string("obs.metrics_host");
  run.obs.metrics_all_ranks = config.get_bool("obs.metrics_all_ranks");
  std::tie(run.obs.trace_first, run.obs.trace_last) = trace_steps(config);

  run.fault.nan_gradient_steps = step_list(config, "fault.nan_gradient_steps");
  return run;
}

Config elastic_config(const Config& config, int world_size) {
  if (!config.get_bool("dist.elastic")) return config;
  const int64_t others = config.get_int("mesh.tp") * config.get_int("mesh.pp");
  const int64_t dp = config.get_int("mesh.dp");
  if (others < 1 || world_size % others != 0 || world_size / others == dp) return config;
  Config resized = config;
  resized.set_override(fmt::format("mesh.dp={}", world_size / others));
  return resized;
}

}  // namespace tessera::train
