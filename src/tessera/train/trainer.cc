#include "tessera/train/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <tuple>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/comm/flight_recorder.h"
#include "tessera/comm/mesh.h"
#include "tessera/comm/world.h"
#include "tessera/core/threading.h"
#include "tessera/core/trace.h"
#include "tessera/data/loader.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/transformer.h"
#include "tessera/parallel/model_parallel.h"
#include "tessera/parallel/pipeline_stages.h"
#include "tessera/runtime/pipeline_runtime.h"
#include "tessera/runtime/train_step.h"
#include "tessera/train/checkpointer.h"
#include "tessera/train/divergence_guard.h"
#include "tessera/train/evaluator.h"
#include "tessera/train/goodput.h"
#include "tessera/train/loss_scaler.h"
#include "tessera/train/lr_schedule.h"
#include "tessera/train/preemption.h"
#include "tessera/train/run_folder.h"
#include "tessera/train/run_report.h"
#include "tessera/train/train_metrics.h"
#include "tessera/train/train_state.h"
#include "tessera/train/training_data.h"

namespace tessera::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// The device this rank trains on: the CPU, or its local rank's CUDA device among those it sees.
kernels::Device train_device(const TrainConfig& tc) {
  if (tc.device == kernels::DeviceKind::kCpu) return {};
  const int devices = kernels::cuda_device_count();
  check(devices > 0, "train.device = cuda, but {}", kernels::cuda_unavailable_reason());
  return {kernels::DeviceKind::kCuda, comm::local_rank() % devices};
}

// One call of train(): what it builds, in order, and the loop over steps.
class Run {
 public:
  Run(const Config& config, const fs::path& out_dir);
  TrainSummary train();

 private:
  // Continues from the newest committed checkpoint, if any; returns its step.
  int64_t resume();
  // Restores the state, the data position and the step's bookkeeping of a checkpoint; returns
  // its manifest.
  ckpt::Manifest restore(const fs::path& step_dir);
  StepResult run_step(int64_t step, double lr);
  // A step's micro-batches through the model (through the pipeline's schedule when there is
  // one): their summed cross-entropy and MoE auxiliary loss on every rank of the replica.
  std::pair<double, double> forward_backward(int64_t step, StepResult& r, double backward_scale);
  void moe_statistics(StepResult& r);
  double batch_loss(const int32_t* inputs, const int32_t* targets, int64_t B);
  int64_t roll_back(int64_t done, const std::string& reason);
  nlohmann::json checkpoint_metadata() const;
  void save(int64_t step);
  std::pair<double, double> evaluate(int64_t step);
  void open_loader(int64_t samples_consumed);

  const Config config_;
  const fs::path out_dir_;
  const RunConfig rc_;
  const std::unique_ptr<RunFolderLock> lock_;
  const TrainConfig& tc_;
  comm::Communicator& world_;
  const comm::Mesh mesh_;
  comm::Communicator& dp_;
  // The ranks holding the same parameters, dp x cp, over which the loss and gradients are summed.
  comm::Communicator& replicas_;
  const model::SequenceSplit split_;  // of each sequence over the cp ranks
  const bool lead_;  // rank 0 alone writes logs, metrics, the resolved config and checkpoints
  const int64_t local_batch_;
  const int64_t local_seq_;  // this rank's positions of each sequence
  data::Dataset dataset_;
  parallel::ModelGroups groups_;
  const kernels::DeviceContext device_;  // where the model and the training state live
  TrainState state_;
  const parallel::PipelineTable table_;  // one rank's plain sequence of micro-batches without pp
  runtime::StageModels models_;          // this rank's stages
  std::optional<runtime::PipelineRuntime> pipeline_;  // over pp ranks
  std::optional<runtime::TrainStep> step_;            // otherwise
  std::vector<int32_t> micro_tokens_;                 // a step's inputs and targets
  std::vector<runtime::MicroBatch> micro_batches_;
  const fs::path ckpt_dir_;
  Checkpointer checkpointer_;
  DivergenceGuard guard_;
  DynamicLossScaler scaler_;
  std::optional<data::Loader> loader_;
  std::optional<Evaluator> evaluator_;
  RunReport report_;
  std::optional<Goodput> goodput_;
  nlohmann::json tokenizer_;
  std::set<int64_t> nan_gradient_steps_;  // still to inject
};

std::vector<int64_t> pipeline_boundaries(const RunConfig& rc) {
  return parallel::stage_boundaries(
      parallel::stage_blocks(rc.model, rc.mesh.pp * rc.mesh.pp_virtual, rc.mesh.pp_layers));
}

std::vector<model::ParameterStore*> stage_stores(TrainState& state) {
  std::vector<model::ParameterStore*> stores;
  for (int k = 0; k < state.stages(); ++k) stores.push_back(&state.store(k));
  return stores;
}

Config sized_for_world(const Config& config) {
  const int ranks = comm::world().size();
  Config sized = elastic_config(config, ranks);
  if (sized.get_int("mesh.dp") != config.get_int("mesh.dp")) {
    spdlog::info("dist.elastic: {} ranks, so mesh.dp {} -> {}", ranks, config.get_int("mesh.dp"),
                 sized.get_int("mesh.dp"));
  }
  return sized;
}

// Applies the run's process-wide settings and, on rank 0, creates and locks the output folder and
// writes the resolved config into it; returns the lock (null on the other ranks).
std::unique_ptr<RunFolderLock> prepare_run(const RunConfig& rc, const fs::path& out_dir,
                                           const Config& config) {
  // Every rank finds a mesh that does not fit the job here, before rank 0 alone starts writing,
  // so that each says why before the launcher stops it.
  comm::check_mesh(rc.mesh, comm::world().size());
  train_device(rc.train);  // a device this rank cannot use is refused before anything is written
  check(rc.mesh.pp == 1 || rc.train.zero <= 1,
        "mesh.pp = {} with train.zero = {}: a pipeline combines with ZeRO-0 or ZeRO-1 only. ZeRO-2 "
        "would reduce-scatter the gradients after every micro-batch's backward on every stage, "
        "and ZeRO-3 gather each stage's parameters for every micro-batch, multiplying the "
        "data-parallel traffic by the micro-batches (Megatron-LM and torchtitan pair pipelines "
        "with ZeRO-1 at most)",
        rc.mesh.pp, rc.train.zero);
  if (rc.train.threads > 0) set_num_threads(int(rc.train.threads));
  comm::set_timeout_seconds(rc.dist.timeout_s);
  if (comm::world().rank() != 0) {
    spdlog::set_level(spdlog::level::warn);
    return nullptr;
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  check(!ec, "{}: cannot create the output directory: {}", out_dir.string(), ec.message());
  auto lock = std::make_unique<RunFolderLock>(out_dir);
  std::ofstream resolved(out_dir / "config.toml");
  resolved << config.to_toml();
  check(resolved.good(), "{}: cannot write config.toml", out_dir.string());
  return lock;
}

Run::Run(const Config& config, const fs::path& out_dir)
    : config_(sized_for_world(config)),
      out_dir_(out_dir),
      rc_(run_config_from(config_)),
      lock_(prepare_run(rc_, out_dir, config_)),
      tc_(rc_.train),
      world_(comm::world()),
      mesh_(world_, rc_.mesh),
      dp_(mesh_.dp()),
      replicas_(mesh_.replicas()),
      split_{rc_.mesh.cp, mesh_.coords().cp},
      lead_(world_.rank() == 0),
      local_batch_(tc_.batch_size / dp_.size()),
      local_seq_(tc_.seq_len / rc_.mesh.cp),
      dataset_(open_training_data(rc_, out_dir, world_)),
      groups_(mesh_, rc_.model, rc_.mesh.sequence_parallel),
      device_(train_device(tc_)),
      state_(device_.context(), rc_.model, tc_, mesh_, groups_.parallel().sharding,
             int64_t(rc_.dist.bucket_mb * 1024 * 1024), pipeline_boundaries(rc_)),
      table_(
          parallel::run_pipeline_table(rc_.model, rc_.mesh, state_.boundaries(), tc_.grad_accum)),
      models_(runtime::build_stage_models(rc_.model, table_, mesh_.coords().pp, state_.boundaries(),
                                          local_batch_, local_seq_,
                                          {.context = &device_.context(),
                                           .precision = tc_.precision,
                                           .recompute = tc_.recompute,
                                           .parallel = &groups_.parallel(),
                                           .document_separator = document_separator(tc_, dataset_)},
                                          stage_stores(state_))),
      ckpt_dir_(out_dir / "checkpoints"),
      checkpointer_(ckpt_dir_, rc_.checkpoint, world_),
      guard_(rc_.guard),
      scaler_(tc_.loss_scale, tc_.loss_scale_growth_interval),
      report_(rc_, out_dir, world_, replicas_.size()),
      tokenizer_(tokenizer_metadata(dataset_, out_dir)),
      nan_gradient_steps_(rc_.fault.nan_gradient_steps.begin(),
                          rc_.fault.nan_gradient_steps.end()) {
  if (rc_.mesh.pp > 1) {
    pipeline_.emplace(table_, mesh_.pp(), models_.stages, models_.slots);
  } else {
    step_.emplace(*models_.stages.front());
  }
  const int64_t n = local_batch_ * local_seq_;
  micro_tokens_.resize(size_t(2 * n * tc_.grad_accum));
  for (int64_t m = 0; m < tc_.grad_accum; ++m) {
    const int32_t* at = micro_tokens_.data() + 2 * n * m;
    micro_batches_.push_back({at, at + n});
  }
  comm::start_flight_recorder(out_dir / "flight");
}

TrainSummary Run::train() {
  const data::DatasetSplit& train_split = dataset_.manifest.train;
  const double unigram = data::unigram_entropy(dataset_.train, rc_.model.vocab_size);
  spdlog::info("data: {} ({} tokenizer, {} training tokens, {} held out, {:.3f} bytes/token)",
               dataset_.dir.string(), dataset_.manifest.tokenizer_kind, dataset_.train.size(),
               dataset_.val.size(), double(train_split.bytes) / double(train_split.tokens));
  spdlog::info(
      "reference points: ln(vocab) = {:.4f} nats, unigram entropy of the corpus = {:.4f} nats",
      std::log(double(rc_.model.vocab_size)), unigram);
  state_.init(uint64_t(tc_.seed));
  log_model(rc_, *models_.stages.front());
  log_parallelism(rc_, state_, groups_, dp_);
  log_pipeline(rc_, table_, state_);
  const std::vector<RankMemoryBytes> memory = log_memory(state_, models_, mesh_, tc_);
  if (checkpointer_.async()) {
    spdlog::info("checkpoints: written in the background, every {} steps, {} kept",
                 rc_.checkpoint.every, rc_.checkpoint.keep_last);
    checkpointer_.reserve(state_);
  }

  const int64_t start_step = resume();
  evaluator_.emplace(dataset_.val, tc_, dp_, mesh_.cp(), split_);
  report_.start(device_.context().device, memory);
  Preemption preemption(rc_.checkpoint.preempt_timeout_s, world_.rank(), world_.size());

  TrainSummary summary;
  std::tie(summary.first_val_loss, summary.final_val_bits_per_byte) = evaluate(start_step);
  summary.final_val_loss = summary.first_val_loss;
  const auto run_start = Clock::now();
  int64_t step = start_step;
  // A save's stall falls between two steps: each step's record counts what came since the last.
  double stall_counted = checkpointer_.stall_seconds();
  while (step < tc_.steps) {
    report_.trace_step(step + 1, false);
    const auto t0 = Clock::now();
    const double stall_at_start = checkpointer_.stall_seconds();
    const double lr = learning_rate(step, tc_);
    const StepResult r = run_step(step, lr);
    int64_t done = step + 1;
    if (r.verdict == DivergenceGuard::Verdict::kRollBack) {
      step = roll_back(done, guard_.reason());
      continue;
    }
    checkpointer_.progress();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const double stall_in_step = checkpointer_.stall_seconds() - stall_at_start;
    const double stall = checkpointer_.stall_seconds() - stall_counted;
    stall_counted = checkpointer_.stall_seconds();
    goodput_->add_step(seconds - stall_in_step);
    goodput_->add_stall(stall);
    const std::string skip_reason =
        r.verdict == DivergenceGuard::Verdict::kApply ? std::string() : guard_.reason();
    const TrainMetrics::Derived derived =
        report_.record(done, lr, r, seconds, stall_in_step, stall, skip_reason);
    if (done % tc_.log_every == 0 || done == tc_.steps) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
      const double eta = elapsed / double(done - start_step) * double(tc_.steps - done);
      report_.log_step(done, lr, r, derived, eta, skip_reason);
    }
    report_.trace_step(done, true);
    step = done;
    if (preemption.stop_requested(world_)) {
      save(done);
      checkpointer_.finish();
      spdlog::info("preempted: checkpoint of step {} committed; the same command resumes it", done);
      summary.preempted = true;
      summary.steps = done;
      summary.checkpoint = ckpt_dir_ / ckpt::step_dir_name(done);
      return summary;
    }
    if (tc_.eval_every > 0 && done % tc_.eval_every == 0 && done != tc_.steps) evaluate(done);
    if (rc_.checkpoint.every > 0 && done % rc_.checkpoint.every == 0 && done != tc_.steps) {
      save(done);
    }
    if (lead_) goodput_->write();
  }
  if (start_step < tc_.steps) {
    std::tie(summary.final_val_loss, summary.final_val_bits_per_byte) = evaluate(tc_.steps);
    save(tc_.steps);
  }
  checkpointer_.finish();
  summary.steps = tc_.steps;
  summary.checkpoint = ckpt::resolve(ckpt_dir_);
  spdlog::info("held-out loss {:.4f} -> {:.4f} nats{} (ln(vocab) {:.4f}, unigram entropy {:.4f})",
               summary.first_val_loss, summary.final_val_loss,
               std::isnan(summary.final_val_bits_per_byte)
                   ? ""
                   : fmt::format(", {:.4f} bits/byte", summary.final_val_bits_per_byte),
               std::log(double(rc_.model.vocab_size)), unigram);
  spdlog::info("checkpoint: {}", summary.checkpoint.string());
  const GoodputAccount g = goodput_->account();
  spdlog::info(
      "goodput {:.1f}% of {} over {} attempt(s): steps {:.1f} s, checkpoint stalls {:.2f} s, "
      "evaluation {:.1f} s, steps trained again {:.1f} s, start-up and restarts {:.1f} s",
      100 * g.goodput(), format_duration(g.wall_s), g.attempts, g.step_s, g.stall_s, g.eval_s,
      g.recomputed_s, g.lost_s());
  if (lead_) goodput_->write();
  report_.metrics().event({{"step", tc_.steps}, {"goodput", g.to_json()}});
  return summary;
}

int64_t Run::resume() {
  std::optional<fs::path> latest = ckpt::find_latest(ckpt_dir_);
  const nlohmann::json meta = latest ? ckpt::read_manifest(*latest).metadata : nlohmann::json();
  if (latest && meta.contains("imported_from")) {
    // Weights from `tessera convert import` carry no optimizer state or data position: the run
    // fine-tunes them from step 0 with fresh AdamW moments, or trains adapters on them.
    if (state_.trains_adapters()) {
      // Adapters imported beside the base (a PEFT folder) are trained on from where they are.
      state_.load_base(ckpt::lora_base(*latest, meta).value_or(*latest));
      if (meta.contains("lora_base")) state_.load(*latest, /*with_optimizer=*/false);
      spdlog::info("training LoRA adapters on the frozen imported weights of {}", latest->string());
    } else {
      state_.load(*latest, /*with_optimizer=*/false);
      spdlog::info("fine-tuning the imported weights of {}", latest->string());
    }
    latest.reset();
  }
  if (!latest) {
    goodput_.emplace(out_dir_ / "goodput.json", nullptr);
    open_loader(0);
    return 0;
  }
  const ckpt::Manifest manifest = restore(*latest);
  const int64_t step = manifest.step;
  goodput_.emplace(out_dir_ / "goodput.json", manifest.metadata.value("goodput", nlohmann::json()));
  spdlog::info("resuming from {} at step {} ({} samples consumed)", latest->string(), step,
               loader_->position());
  return step;
}

ckpt::Manifest Run::restore(const fs::path& step_dir) {
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  const nlohmann::json& meta = manifest.metadata;
  const bool adapters = meta.contains("lora_base");
  check(adapters == state_.trains_adapters(),
        "{}: {}; resume it with the train.lora_* settings it was written with", step_dir.string(),
        adapters ? "holds LoRA adapters alone, and this run trains every weight"
                 : "holds a whole model's training state, and this run trains LoRA adapters");
  if (const auto base = ckpt::lora_base(step_dir, meta)) state_.load_base(*base);
  state_.load(step_dir, /*with_optimizer=*/true);
  const int64_t samples_consumed = meta.value("samples_consumed", int64_t{-1});
  check(samples_consumed >= 0, "{}: the checkpoint metadata has no samples_consumed",
        step_dir.string());
  state_.set_steps_taken(meta.value("optimizer_steps", manifest.step));
  scaler_.restore(meta.value("loss_scale", tc_.loss_scale),
                  meta.value("skipped_steps", int64_t{0}));
  guard_.restore(meta.value("guard", nlohmann::json()));
  if (!loader_) open_loader(samples_consumed);
  return manifest;
}

void Run::open_loader(int64_t samples_consumed) {
  loader_.emplace(dataset_.train,
                  data::LoaderOptions{.batch_size = local_batch_,
                                      .seq_len = tc_.seq_len,
                                      .seed = uint64_t(tc_.seed),
                                      .rank = dp_.rank(),
                                      .world = dp_.size(),
                                      .prefetch = rc_.data.prefetch},
                  samples_consumed);
}

StepResult Run::run_step(int64_t step, double lr) {
  StepResult r;
  const bool f16 = tc_.precision == model::Precision::kF16;
  r.loss_scale = f16 ? scaler_.scale() : 1.0;
  // An injected fault: every gradient of the step becomes NaN through the backward's scale.
  const bool poisoned = nan_gradient_steps_.erase(step + 1) > 0;
  const double backward_scale = poisoned ? std::numeric_limits<double>::quiet_NaN() : r.loss_scale;
  // Clearing the last step's gradients is the optimizer's part, as torch's zero_grad is.
  const auto zero_start = Clock::now();
  state_.zero_grad();
  r.optimizer = std::chrono::duration<double>(Clock::now() - zero_start).count();
  // Summed over ranks and micro-steps, the gradients are those of the global mean loss.
  const auto [loss, aux] = forward_backward(step, r, backward_scale);
  double losses[2] = {loss, aux};
  r.comm_wait = state_.reduce_gradients();
  if (replicas_.size() > 1) {
    // The first collective after the gradients' reduction waits for the slowest rank to reach it.
    const auto reduce_start = Clock::now();
    replicas_.all_reduce(losses, 2);
    r.comm_wait += std::chrono::duration<double>(Clock::now() - reduce_start).count();
  }
  if (rc_.model.is_moe()) moe_statistics(r);
  r.loss = losses[0];
  r.aux_loss = losses[1] / double(tc_.grad_accum * dp_.size());

  // The rest of the optimizer's part: judging the gradients, their norm and the update.
  const trace::Span span("optimizer", "step");
  const auto optimizer_start = Clock::now();
  const auto judged = [&] {
    r.optimizer += std::chrono::duration<double>(Clock::now() - optimizer_start).count();
    return r;
  };
  StepHealth health{.loss = r.loss};
  if (f16) {
    const bool at_floor = scaler_.at_floor();
    const bool finite = state_.gradients_finite();
    r.f16_skipped = !scaler_.update(finite) && !at_floor;
    health.overflow_at_floor = !finite && at_floor;
  }
  health.grad_norm = r.f16_skipped ? 0 : state_.gradient_norm() / r.loss_scale;
  r.grad_norm = health.grad_norm;
  if (r.f16_skipped) return judged();
  r.verdict = guard_.judge(health);
  if (r.verdict != DivergenceGuard::Verdict::kApply) {
    spdlog::warn("step {} skipped: {} ({} of train.max_bad_steps = {} in a row)", step + 1,
                 guard_.reason(), guard_.bad_in_a_row(), rc_.guard.max_bad_steps);
    return judged();
  }
  const double clip =
      tc_.grad_clip > 0 && r.grad_norm > tc_.grad_clip ? tc_.grad_clip / (r.grad_norm + 1e-6) : 1.0;
  state_.update(lr, float(clip / r.loss_scale));
  return judged();
}

std::pair<double, double> Run::forward_backward(int64_t step, StepResult& r,
                                                double backward_scale) {
  const auto phase_seconds = [&] {
    return pipeline_ ? pipeline_->phase_seconds() : step_->phase_seconds();
  };
  const runtime::PhaseSeconds before = phase_seconds();
  // The forwards' and backwards' compute, and the collectives inside them.
  const auto count_phases = [&] {
    const runtime::PhaseSeconds after = phase_seconds();
    r.model_comm = after.forward_communication - before.forward_communication +
                   after.backward_communication - before.backward_communication;
    r.forward = after.forward - before.forward -
                (after.forward_communication - before.forward_communication);
    r.backward = after.backward - before.backward -
                 (after.backward_communication - before.backward_communication);
  };
  const int64_t n = local_batch_ * local_seq_;
  for (int64_t micro = 0; micro < tc_.grad_accum; ++micro) {
    const trace::Span span("data wait", "step");
    const data::Batch& batch = loader_->next();
    r.data_wait += loader_->last_wait_seconds();
    int32_t* at = micro_tokens_.data() + 2 * n * micro;
    split_.take(batch.inputs, at, local_batch_, local_seq_);
    split_.take(batch.targets, at + n, local_batch_, local_seq_);
  }
  weigh_micro_batches(micro_batches_, n, dataset_.train.has_loss_mask(), replicas_);
  if (rc_.model.lora.dropout > 0) draw_dropout_keys(micro_batches_, tc_.seed, step, dp_.rank());
  if (!pipeline_) {
    double losses[2] = {0, 0};
    for (int64_t micro = 0; micro < tc_.grad_accum; ++micro) {
      const runtime::MicroBatch& b = micro_batches_[size_t(micro)];
      state_.begin_micro_step(micro + 1 == tc_.grad_accum);
      losses[0] +=
          b.share * step_->forward_backward(b.inputs, b.targets, local_batch_, local_seq_,
                                            float(backward_scale * b.share), b.dropout_key);
      losses[1] += step_->model().aux_loss();
    }
    count_phases();
    return {losses[0], losses[1]};
  }
  state_.begin_micro_step(false);
  const auto start = Clock::now();
  double losses[2] = {
      pipeline_->run(micro_batches_, local_batch_, local_seq_, float(backward_scale)),
      pipeline_->aux_loss()};
  const double pipeline_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  count_phases();
  // What the schedule spent outside its stages' forwards and backwards: waiting for messages.
  r.pipeline_wait = std::max(0.0, pipeline_seconds - r.forward - r.backward - r.model_comm);
  mesh_.pp().all_reduce(losses, 2);
  return {losses[0], losses[1]};
}

// Each block's expert token counts and the dropped assignments of the last forward, over the
// pipeline's stages.
void Run::moe_statistics(StepResult& r) {
  const int64_t L = rc_.model.n_layer, E = rc_.model.moe.n_experts;
  std::vector<double> counts(size_t(L * E + 1), 0.0);
  for (int k = 0; k < state_.stages(); ++k) {
    const model::Transformer& m = *models_.stages[k];
    const model::ModelLayout& layout = state_.layout(k);
    for (int64_t l = 0; l < int64_t(layout.blocks.size()); ++l) {
      const std::span<const int64_t> tokens = m.expert_tokens(l);
      std::copy(tokens.begin(), tokens.end(), counts.begin() + (layout.first_block + l) * E);
    }
    counts.back() += double(m.dropped_assignments());
  }
  if (pipeline_) mesh_.pp().all_reduce(counts.data(), int64_t(counts.size()));
  r.expert_tokens.assign(size_t(L), std::vector<int64_t>(size_t(E)));
  for (int64_t i = 0; i < L * E; ++i) r.expert_tokens[i / E][i % E] = int64_t(counts[i]);
  r.dropped = int64_t(counts.back());
}

double Run::batch_loss(const int32_t* inputs, const int32_t* targets, int64_t B) {
  if (!pipeline_) return models_.stages.front()->forward(inputs, targets, B, local_seq_);
  double loss = pipeline_->evaluate({inputs, targets}, B, local_seq_);
  mesh_.pp().all_reduce(&loss, 1);
  return loss;
}

// Back to the last committed checkpoint (or the initial state), keeping the data position: the
// batches since that checkpoint, the bad ones among them, are not trained on again.
int64_t Run::roll_back(int64_t done, const std::string& reason) {
  checkpointer_.finish();
  const std::optional<fs::path> last = ckpt::find_latest(ckpt_dir_);
  const bool has_state = last && !ckpt::read_manifest(*last).metadata.contains("imported_from");
  guard_.roll_back(done, has_state ? last->string() : std::string("the initial state"));
  const int64_t samples = loader_->position();
  int64_t step = 0;
  if (has_state) {
    const ckpt::Manifest manifest = restore(*last);
    step = manifest.step;
    goodput_->rolled_back(manifest.metadata.value("goodput", nlohmann::json()));
  } else {
    state_.init(uint64_t(tc_.seed));
    state_.set_steps_taken(0);
    scaler_.restore(tc_.loss_scale, 0);
    goodput_->rolled_back(nullptr);
  }
  spdlog::warn(
      "rolled back to step {} ({}) after {} bad steps in a row up to step {} ({}); rollback {} of "
      "train.max_rollbacks = {}; training continues on the data after sample {}, skipping what "
      "came since",
      step, has_state ? last->string() : "the initial state", rc_.guard.max_bad_steps, done, reason,
      guard_.rollbacks(), rc_.guard.max_rollbacks, samples);
  report_.metrics().event({{"step", done}, {"rolled_back_to", step}, {"reason", reason}});
  return step;
}

nlohmann::json Run::checkpoint_metadata() const {
  nlohmann::json meta = {{"config", config_.to_json()},
                         {"model", enum_name(rc_.model.arch)},
                         {"tokenizer", tokenizer_},
                         {"samples_consumed", loader_->position()},
                         {"optimizer_steps", state_.steps_taken()},
                         {"loss_scale", scaler_.scale()},
                         {"skipped_steps", scaler_.skipped_steps()},
                         {"guard", guard_.state()},
                         {"goodput", goodput_->account().to_json()}};
  if (state_.trains_adapters()) {
    const std::optional<fs::path>& base = state_.lora_base();
    meta["lora_base"] = base ? ckpt::lora_base_reference(*base, ckpt_dir_) : nlohmann::json();
  }
  return meta;
}

void Run::save(int64_t step) {
  const trace::Span span("checkpoint", "step");
  checkpointer_.save(step, state_, checkpoint_metadata());
}

// Loss per byte of text, comparable across tokenizers: nats per token times tokens per byte. A
// loss mask (chat data) leaves the loss over the trained tokens, whose bytes are not counted:
// their bits per byte are NaN.
std::pair<double, double> Run::evaluate(int64_t step) {
  const auto t0 = Clock::now();
  const data::DatasetSplit& val_split = dataset_.manifest.val;
  const double tokens_per_byte = double(val_split.tokens) / double(val_split.bytes);
  const double val =
      evaluator_->mean_loss([&](const int32_t* inputs, const int32_t* targets, int64_t B) {
        return batch_loss(inputs, targets, B);
      });
  const bool masked = dataset_.val.has_loss_mask();
  const double bits_per_byte = masked ? std::nan("") : val * tokens_per_byte / std::log(2.0);
  if (masked) {
    spdlog::info("step {:>6} | held-out loss {:.4f} on the trained tokens", step, val);
  } else {
    spdlog::info("step {:>6} | held-out loss {:.4f} | {:.4f} bits/byte", step, val, bits_per_byte);
  }
  report_.metrics().held_out(step, val, bits_per_byte);
  goodput_->add_eval(std::chrono::duration<double>(Clock::now() - t0).count());
  return {val, bits_per_byte};
}

}  // namespace

TrainSummary train(const Config& config, const fs::path& out_dir) {
  Run run(config, out_dir);
  return run.train();
}

}  // namespace tessera::train
