#include "tessera/train/trainer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <tuple>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/core/threading.h"
#include "tessera/data/loader.h"
#include "tessera/dist/launch.h"
#include "tessera/dist/mesh.h"
#include "tessera/dist/model_parallel.h"
#include "tessera/dist/zero_memory.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/transformer.h"
#include "tessera/obs/metrics_log.h"
#include "tessera/train/loss_scaler.h"
#include "tessera/train/lr_schedule.h"
#include "tessera/train/training_data.h"
#include "tessera/train/train_state.h"

namespace tessera::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string format_duration(double seconds) {
  int64_t s = std::llround(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

// Held-out loss over fixed batches of the global batch size; each data-parallel rank evaluates
// its share of every batch.
class Evaluator {
 public:
  Evaluator(const data::TokenStream& val, const TrainConfig& c, dist::Communicator& dp)
      : val_(val),
        config_(c),
        dp_(dp),
        inputs_(c.batch_size * c.seq_len),
        targets_(inputs_.size()) {}

  double mean_loss(model::Transformer& model) {
    const int64_t local = config_.batch_size / dp_.size(), first = dp_.rank() * local;
    double sum = 0;
    for (int64_t i = 0; i < config_.eval_batches; ++i) {
      data::fill_eval_batch(val_, config_.batch_size, config_.seq_len, i, config_.eval_batches,
                            inputs_.data(), targets_.data());
      const int64_t at = first * config_.seq_len;
      sum += model.forward(inputs_.data() + at, targets_.data() + at, local, config_.seq_len);
    }
    dp_.all_reduce(&sum, 1);
    return sum / double(config_.eval_batches * dp_.size());
  }

 private:
  const data::TokenStream& val_;
  TrainConfig config_;
  dist::Communicator& dp_;
  std::vector<int32_t> inputs_, targets_;
};

void log_model(const RunConfig& rc, const model::Transformer& model) {
  const model::ModelConfig& m = rc.model;
  const model::ParameterCount count = model::count_parameters(m);
  std::string shape = fmt::format("{}, {} layers, {} heads ({} key/value), d_model {}, ffn {}",
                                  model::architecture_name(m.arch), m.n_layer, m.n_head,
                                  m.kv_heads(), m.d_model, m.ffn());
  if (m.is_moe()) {
    shape += fmt::format(", {} experts top-{} ({} shared), {:.2f}M active parameters",
                         m.moe.n_experts, m.moe.top_k, m.moe.n_shared, count.active / 1e6);
  }
  spdlog::info("model: {}, {:.2f}M parameters, {} threads", shape, count.total / 1e6,
               num_threads());
  const TrainConfig& tc = rc.train;
  std::string matmul = "f32 (oneDNN sgemm)";
  if (tc.precision != model::Precision::kF32) {
    const kernels::LowPrecision low = model::low_precision_of(tc.precision);
    matmul = fmt::format("{} ({})", model::precision_name(tc.precision),
                         kernels::low_precision_gemm_path(low));
  }
  const double mib = 1024.0 * 1024.0;
  spdlog::info(
      "precision: matmuls {}; master weights and AdamW f32 | recompute {}: {:.2f} MiB of "
      "activations kept per layer, {:.2f} MiB working set",
      matmul, model::recompute_name(tc.recompute), model.saved_activation_bytes_per_layer() / mib,
      model.working_activation_bytes() / mib);
}

// Every rank's bytes, logged by rank 0 next to what the ZeRO formula predicts for its stage: the
// dense parameters over the data-parallel ranks, a mixture's expert stacks over the ranks that
// hold the same experts.
void log_memory(const TrainState& state, const model::Transformer& model, const dist::Mesh& mesh,
                const TrainConfig& tc) {
  constexpr int kFields = 5;
  dist::Communicator& world = mesh.world();
  const MemoryReport m = state.memory();
  std::vector<double> all(size_t(kFields * world.size()), 0.0);
  const double mine[kFields] = {double(m.params), double(m.grads), double(m.optimizer),
                                double(model.activation_bytes_total()), double(m.working)};
  std::copy(mine, mine + kFields, all.begin() + kFields * world.rank());
  world.all_reduce(all.data(), int64_t(all.size()));
  const model::ModelLayout& layout = state.layout();
  const dist::MeshShape& shape = mesh.shape();
  const int64_t dense = layout.experts_begin, experts = layout.params.total() - dense;
  const double formula =
      dist::zero_model_state(int(tc.zero), tc.precision, double(dense), shape.dp).total() +
      dist::zero_model_state(int(tc.zero), tc.precision, double(experts), shape.dp / shape.ep)
          .total();
  const double mib = 1024.0 * 1024.0;
  for (int r = 0; r < world.size(); ++r) {
    const double* v = all.data() + kFields * r;
    const double model_state = v[0] + v[1] + v[2];
    const std::string expert_share =
        experts > 0 ? fmt::format(" and {} expert parameters over {} ranks", experts,
                                  shape.dp / shape.ep)
                    : std::string();
    spdlog::info(
        "memory rank {}: model state {:.0f} B = {:.3f} x ZeRO-{} formula {:.0f} B ({} {} "
        "parameters over {} ranks{}) | parameters {:.0f} B, gradients {:.0f} B, optimizer {:.0f} "
        "B, activations {:.0f} B ({:.2f} MiB in all), working buffers {:.2f} MiB",
        r, model_state, model_state / formula, tc.zero, formula, dense,
        model::precision_name(tc.precision), shape.dp, expert_share, v[0], v[1], v[2], v[3],
        (v[0] + v[1] + v[2] + v[3]) / mib, v[4] / mib);
  }
}

}  // namespace

TrainSummary train(const Config& config, const fs::path& out_dir) {
  const RunConfig rc = run_config_from(config);
  const TrainConfig& tc = rc.train;
  if (tc.threads > 0) set_num_threads(int(tc.threads));
  dist::set_timeout_seconds(rc.dist.timeout_s);
  dist::Communicator& world = dist::world();
  const dist::Mesh mesh(world, rc.mesh);
  dist::Communicator& dp = mesh.dp();
  // Rank 0 alone writes logs, metrics, the resolved config and checkpoints.
  const bool lead = world.rank() == 0;
  if (!lead) spdlog::set_level(spdlog::level::warn);
  const int64_t local_batch = tc.batch_size / dp.size();

  if (lead) {
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    check(!ec, "{}: cannot create the output directory: {}", out_dir.string(), ec.message());
    std::ofstream resolved(out_dir / "config.toml");
    resolved << config.to_toml();
    check(resolved.good(), "{}: cannot write config.toml", out_dir.string());
  }
  // Text is prepared by rank 0; the others open what it wrote.
  const data::Dataset dataset = [&] {
    if (!lead) world.barrier();
    data::Dataset d = open_training_data(rc, out_dir);
    if (lead) world.barrier();
    return d;
  }();
  const data::DatasetSplit& train_split = dataset.manifest.train;
  const data::DatasetSplit& val_split = dataset.manifest.val;
  const double unigram = data::unigram_entropy(dataset.train, rc.model.vocab_size);
  spdlog::info("data: {} ({} tokenizer, {} training tokens, {} held out, {:.3f} bytes/token)",
               dataset.dir.string(), dataset.manifest.tokenizer_kind, dataset.train.size(),
               dataset.val.size(), double(train_split.bytes) / double(train_split.tokens));
  spdlog::info(
      "reference points: ln(vocab) = {:.4f} nats, unigram entropy of the corpus = {:.4f} nats",
      std::log(double(rc.model.vocab_size)), unigram);

  const dist::ModelGroups groups(mesh, rc.model, rc.mesh.sequence_parallel);
  TrainState state(rc.model, tc, mesh, groups.parallel().sharding,
                   int64_t(rc.dist.bucket_mb * 1024 * 1024));
  model::Transformer model(rc.model, local_batch, tc.seq_len, /*training=*/true,
                           {.precision = tc.precision,
                            .recompute = tc.recompute,
                            .store = &state,
                            .parallel = &groups.parallel()});
  state.init(uint64_t(tc.seed));
  log_model(rc, model);
  if (dp.size() > 1) {
    const std::string buckets =
        tc.zero < 2 ? fmt::format("{} all-reduce buckets of {:g} MiB overlapping backward",
                                  state.bucket_count(), rc.dist.bucket_mb)
                    : std::string("gradients reduce-scattered block by block");
    spdlog::info("data parallel: {} ranks, ZeRO stage {}, {} sequences each per micro-batch, {}",
                 dp.size(), tc.zero, local_batch, buckets);
  }
  if (rc.mesh.tp > 1 || rc.mesh.ep > 1) {
    const model::ModelLayout& l = state.layout();
    const std::string experts =
        rc.model.is_moe() ? fmt::format(", {} of {} experts", rc.model.moe.n_experts / rc.mesh.ep,
                                        rc.model.moe.n_experts)
                          : std::string();
    spdlog::info(
        "model parallel: mesh {}{} | this rank holds {} of {} attention heads, {} of {} "
        "vocabulary rows (padded to {}){}",
        rc.mesh.str(), groups.parallel().sequence_parallel ? ", sequence parallel" : "",
        rc.model.n_head / rc.mesh.tp, rc.model.n_head, l.vocab.real(), rc.model.vocab_size,
        l.vocab.padded, experts);
  }
  log_memory(state, model, mesh, tc);

  const fs::path ckpt_dir = out_dir / "checkpoints";
  int64_t start_step = 0, samples_consumed = 0;
  std::pair<double, int64_t> loss_scale_state{tc.loss_scale, 0};
  std::optional<fs::path> latest = ckpt::find_latest(ckpt_dir);
  if (latest && ckpt::read_manifest(*latest).metadata.contains("imported_from")) {
    // Weights from `tessera convert import` carry no optimizer state or data position: the run
    // fine-tunes them from step 0 with fresh AdamW moments.
    state.load(*latest, /*with_optimizer=*/false);
    spdlog::info("fine-tuning the imported weights of {}", latest->string());
    latest.reset();
  }
  if (latest) {
    state.load(*latest, /*with_optimizer=*/true);
    const ckpt::Manifest manifest = ckpt::read_manifest(*latest);
    start_step = manifest.step;
    samples_consumed = manifest.metadata.value("samples_consumed", int64_t{-1});
    check(samples_consumed >= 0, "{}: the checkpoint metadata has no samples_consumed",
          latest->string());
    state.set_steps_taken(manifest.metadata.value("optimizer_steps", start_step));
    loss_scale_state = {manifest.metadata.value("loss_scale", tc.loss_scale),
                        manifest.metadata.value("skipped_steps", int64_t{0})};
    spdlog::info("resuming from {} at step {} ({} samples consumed)", latest->string(), start_step,
                 samples_consumed);
  }

  DynamicLossScaler scaler(tc.loss_scale, tc.loss_scale_growth_interval);
  scaler.restore(loss_scale_state.first, loss_scale_state.second);
  const bool f16 = tc.precision == model::Precision::kF16;
  data::Loader loader(dataset.train,
                      {.batch_size = local_batch,
                       .seq_len = tc.seq_len,
                       .seed = uint64_t(tc.seed),
                       .rank = dp.rank(),
                       .world = dp.size(),
                       .prefetch = rc.data.prefetch},
                      samples_consumed);
  Evaluator evaluator(dataset.val, tc, dp);
  std::optional<obs::JsonlWriter> metrics;
  if (lead) metrics.emplace(out_dir / "metrics.jsonl");
  const int64_t tokens_per_step = tc.batch_size * tc.seq_len * tc.grad_accum;
  const nlohmann::json tokenizer = tokenizer_metadata(dataset, out_dir);

  auto save = [&](int64_t step) {
    nlohmann::json meta = {{"config", config.to_json()},
                           {"model", model::architecture_name(rc.model.arch)},
                           {"tokenizer", tokenizer},
                           {"samples_consumed", loader.position()},
                           {"optimizer_steps", state.steps_taken()},
                           {"loss_scale", scaler.scale()},
                           {"skipped_steps", scaler.skipped_steps()}};
    const int keep_last = int(rc.checkpoint.keep_last);
    const nlohmann::json placed = state.checkpoint_layout();
    if (placed.is_null()) {
      if (!lead) return ckpt_dir / ckpt::step_dir_name(step);
      return ckpt::save(ckpt_dir, step, state.checkpoint_tensors(), meta, keep_last);
    }
    // Every rank writes its pieces into the step directory that rank 0 opens and then commits.
    meta["placed"] = placed;
    if (lead) ckpt::begin_save(ckpt_dir, step);
    world.barrier();
    ckpt::write_part(ckpt::pending_step_dir(ckpt_dir, step), world.rank(),
                     state.checkpoint_tensors());
    world.barrier();
    fs::path saved = ckpt_dir / ckpt::step_dir_name(step);
    if (lead) saved = ckpt::commit_save(ckpt_dir, step, world.size(), meta, keep_last);
    world.barrier();
    return saved;
  };
  // Loss per byte of text, comparable across tokenizers: nats per token times tokens per byte.
  const double tokens_per_byte = double(val_split.tokens) / double(val_split.bytes);
  auto evaluate = [&](int64_t step) {
    const double val = evaluator.mean_loss(model);
    const double bits_per_byte = val * tokens_per_byte / std::log(2.0);
    spdlog::info("step {:>6} | held-out loss {:.4f} | {:.4f} bits/byte", step, val, bits_per_byte);
    if (metrics) {
      metrics->write({{"step", step}, {"val_loss", val}, {"val_bits_per_byte", bits_per_byte}});
    }
    return std::pair{val, bits_per_byte};
  };

  TrainSummary summary;
  std::tie(summary.first_val_loss, summary.final_val_bits_per_byte) = evaluate(start_step);
  summary.final_val_loss = summary.first_val_loss;
  const auto run_start = Clock::now();
  const bool model_parallel = rc.mesh.tp > 1 || rc.mesh.ep > 1;
  for (int64_t step = start_step; step < tc.steps; ++step) {
    const auto t0 = Clock::now();
    const double model_comm_before = groups.communication_seconds();
    const double lr = learning_rate(step, tc);
    state.zero_grad();
    double losses[2] = {0, 0};  // cross-entropy and MoE auxiliary loss, averaged below
    double data_wait = 0;
    const double loss_scale = f16 ? scaler.scale() : 1.0;
    for (int64_t micro = 0; micro < tc.grad_accum; ++micro) {
      const data::Batch& batch = loader.next();
      data_wait += loader.last_wait_seconds();
      state.begin_micro_step(micro + 1 == tc.grad_accum);
      // Summed over ranks and micro-steps, the gradients are those of the global mean loss.
      losses[0] += model.forward_backward(batch.inputs, batch.targets, local_batch, tc.seq_len,
                                          float(loss_scale / double(tc.grad_accum * dp.size())));
      losses[1] += model.aux_loss();
    }
    const double comm_wait = state.reduce_gradients();
    if (dp.size() > 1) dp.all_reduce(losses, 2);
    const double loss = losses[0] / double(tc.grad_accum * dp.size());
    const double aux_loss = losses[1] / double(tc.grad_accum * dp.size());
    double grad_norm = 0;
    const bool stepped = !f16 || scaler.update(state.gradients_finite());
    if (stepped) {
      grad_norm = state.gradient_norm() / loss_scale;
      const double clip =
          tc.grad_clip > 0 && grad_norm > tc.grad_clip ? tc.grad_clip / (grad_norm + 1e-6) : 1.0;
      state.update(lr, float(clip / loss_scale));
    }
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
    const int64_t done = step + 1;
    nlohmann::json record = {{"step", done},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", grad_norm},
                             {"tokens_per_s", tokens_per_step / dt},
                             {"step_s", dt},
                             {"data_wait_s", data_wait}};
    if (dp.size() > 1) record["comm_wait_s"] = comm_wait;
    std::string extra;
    if (model_parallel) {
      const double model_comm = groups.communication_seconds() - model_comm_before;
      record["model_comm_s"] = model_comm;
      extra += fmt::format(" | tp/ep comm {:.1f} ms", 1e3 * model_comm);
    }
    if (f16) {
      record["loss_scale"] = loss_scale;
      record["skipped"] = !stepped;
      extra +=
          fmt::format(" | loss scale {:g}{}", loss_scale, stepped ? "" : " (overflow, skipped)");
    }
    if (rc.model.is_moe()) {
      nlohmann::json counts = nlohmann::json::array();
      for (int64_t l = 0; l < rc.model.n_layer; ++l) counts.push_back(model.expert_tokens(l));
      record["aux_loss"] = aux_loss;
      record["expert_tokens"] = counts;
      record["dropped_assignments"] = model.dropped_assignments();
      extra += fmt::format(" | aux {:.4f} | dropped {}", aux_loss, model.dropped_assignments());
    }
    if (metrics) metrics->write(record);
    if (done % tc.log_every == 0 || done == tc.steps) {
      double eta = elapsed / double(done - start_step) * double(tc.steps - done);
      spdlog::info(
          "step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | data wait "
          "{:.1f} ms{} | ETA {}",
          done, tc.steps, loss, lr, grad_norm, tokens_per_step / dt, 1e3 * data_wait, extra,
          format_duration(eta));
    }
    if (tc.eval_every > 0 && done % tc.eval_every == 0 && done != tc.steps) evaluate(done);
    if (rc.checkpoint.every > 0 && done % rc.checkpoint.every == 0 && done != tc.steps) save(done);
  }
  if (start_step < tc.steps) {
    std::tie(summary.final_val_loss, summary.final_val_bits_per_byte) = evaluate(tc.steps);
  }
  summary.steps = tc.steps;
  summary.checkpoint = start_step < tc.steps ? save(tc.steps) : ckpt::resolve(ckpt_dir);
  spdlog::info(
      "held-out loss {:.4f} -> {:.4f} nats, {:.4f} bits/byte (ln(vocab) {:.4f}, unigram entropy "
      "{:.4f})",
      summary.first_val_loss, summary.final_val_loss, summary.final_val_bits_per_byte,
      std::log(double(rc.model.vocab_size)), unigram);
  spdlog::info("checkpoint: {}", summary.checkpoint.string());
  return summary;
}

}  // namespace tessera::train
