#include "tessera/train/trainer.h"

#include <spdlog/spdlog.h>

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
#include "tessera/kernels/peak_flops.h"
#include "tessera/model/flops.h"
#include "tessera/model/transformer.h"
#include "tessera/obs/chrome_trace.h"
#include "tessera/obs/live_page.h"
#include "tessera/obs/metrics_server.h"
#include "tessera/parallel/model_parallel.h"
#include "tessera/parallel/pipeline_runtime.h"
#include "tessera/parallel/pipeline_simulator.h"
#include "tessera/parallel/pipeline_stages.h"
#include "tessera/parallel/zero_memory.h"
#include "tessera/train/checkpointer.h"
#include "tessera/train/divergence_guard.h"
#include "tessera/train/goodput.h"
#include "tessera/train/loss_scaler.h"
#include "tessera/train/lr_schedule.h"
#include "tessera/train/preemption.h"
#include "tessera/train/run_folder.h"
#include "tessera/train/train_metrics.h"
#include "tessera/train/train_state.h"
#include "tessera/train/training_data.h"

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
// its share of every batch with `loss_of` (its mean loss, on every rank of the replica).
class Evaluator {
 public:
  using BatchLoss = std::function<double(const int32_t* inputs, const int32_t* targets, int64_t B)>;
  Evaluator(const data::TokenStream& val, const TrainConfig& c, comm::Communicator& dp)
      : val_(val),
        config_(c),
        dp_(dp),
        inputs_(c.batch_size * c.seq_len),
        targets_(inputs_.size()) {}

  double mean_loss(const BatchLoss& loss_of) {
    const int64_t local = config_.batch_size / dp_.size(), first = dp_.rank() * local;
    double sum = 0;
    for (int64_t i = 0; i < config_.eval_batches; ++i) {
      data::fill_eval_batch(val_, config_.batch_size, config_.seq_len, i, config_.eval_batches,
                            inputs_.data(), targets_.data());
      const int64_t at = first * config_.seq_len;
      sum += loss_of(inputs_.data() + at, targets_.data() + at, local);
    }
    dp_.all_reduce(&sum, 1);
    return sum / double(config_.eval_batches * dp_.size());
  }

 private:
  const data::TokenStream& val_;
  TrainConfig config_;
  comm::Communicator& dp_;
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

// Every rank's bytes, logged by rank 0 next to what the ZeRO formula predicts for its pipeline
// stages: their dense parameters over the data-parallel ranks, a mixture's expert stacks over the
// ranks that hold the same experts. Returns them, for the metrics.
std::vector<RankMemoryBytes> log_memory(const TrainState& state,
                                        const parallel::StageModels& models, const comm::Mesh& mesh,
                                        const TrainConfig& tc) {
  constexpr int kFields = 7;
  comm::Communicator& world = mesh.world();
  const comm::MeshShape& shape = mesh.shape();
  const MemoryReport m = state.memory();
  double activations = 0, dense = 0, experts = 0;
  for (const model::Transformer* stage : models.stages) {
    activations += double(stage->activation_bytes_total());
  }
  for (int k = 0; k < state.stages(); ++k) {
    const model::ModelLayout& layout = state.layout(k);
    dense += double(layout.experts_begin);
    experts += double(layout.params.total() - layout.experts_begin);
  }
  std::vector<double> all(size_t(kFields * world.size()), 0.0);
  const double mine[kFields] = {double(m.params), double(m.grads),   double(m.optimizer),
                                activations,      double(m.working), dense,
                                experts};
  std::copy(mine, mine + kFields, all.begin() + kFields * world.rank());
  world.all_reduce(all.data(), int64_t(all.size()));
  const double mib = 1024.0 * 1024.0;
  std::vector<RankMemoryBytes> memory(size_t(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    const double* v = all.data() + kFields * r;
    memory[r].bytes = {v[0], v[1], v[2], v[3]};
    const double formula =
        parallel::zero_model_state(int(tc.zero), tc.precision, v[5], shape.dp).total() +
        parallel::zero_model_state(int(tc.zero), tc.precision, v[6], shape.dp / shape.ep).total();
    const double model_state = v[0] + v[1] + v[2];
    const std::string expert_share =
        v[6] > 0
            ? fmt::format(" and {:.0f} expert parameters over {} ranks", v[6], shape.dp / shape.ep)
            : std::string();
    const std::string stage =
        shape.pp > 1 ? fmt::format(" (pipeline rank {})", mesh.coords_of(r).pp) : std::string();
    spdlog::info(
        "memory rank {}{}: model state {:.0f} B = {:.3f} x ZeRO-{} formula {:.0f} B ({:.0f} {} "
        "parameters over {} ranks{}) | parameters {:.0f} B, gradients {:.0f} B, optimizer {:.0f} "
        "B, activations {:.0f} B ({:.2f} MiB in all), working buffers {:.2f} MiB",
        r, stage, model_state, model_state / formula, tc.zero, formula, v[5],
        model::precision_name(tc.precision), shape.dp, expert_share, v[0], v[1], v[2], v[3],
        (v[0] + v[1] + v[2] + v[3]) / mib, v[4] / mib);
  }
  return memory;
}

// The device this rank trains on: the CPU, or its local rank's CUDA device among those it sees.
kernels::Device train_device(const TrainConfig& tc) {
  if (tc.device == kernels::DeviceKind::kCpu) return {};
  const int devices = kernels::cuda_device_count();
  check(devices > 0, "train.device = cuda, but {}", kernels::cuda_unavailable_reason());
  return {kernels::DeviceKind::kCuda, comm::local_rank() % devices};
}

// The peak FLOP/s that MFU divides by, over all ranks: train.peak_flops per rank when given, else
// a CUDA device's dense bf16 peak, else each rank's CPU measured now.
std::pair<double, std::string> job_peak_flops(const TrainConfig& tc, const kernels::Device& device,
                                              comm::Communicator& world) {
  if (tc.peak_flops > 0) {
    return {tc.peak_flops * world.size(),
            fmt::format("train.peak_flops = {:.4g} FLOP/s per rank", tc.peak_flops)};
  }
  if (device.kind == kernels::DeviceKind::kCuda) {
    const std::string name = kernels::cuda_device_info(device.ordinal).name;
    const double peak = kernels::cuda_dense_bf16_peak(name);
    return {peak * world.size(),
            fmt::format("{}: dense bf16 peak {:.0f} TFLOP/s per rank", name, peak / 1e12)};
  }
  std::optional<kernels::LowPrecision> low;
  if (tc.precision != model::Precision::kF32) low = model::low_precision_of(tc.precision);
  const kernels::PeakFlops mine = kernels::measure_peak_flops(low);
  double total = mine.flops_per_second;
  world.all_reduce(&total, 1);
  return {total, fmt::format("measured at start-up on each rank: {}, {:.1f} GFLOP/s on rank 0",
                             mine.how, mine.flops_per_second / 1e9)};
}

// The seconds each phase of the step has taken on this rank's models so far.
model::Transformer::PhaseSeconds phase_seconds(const parallel::StageModels& models) {
  model::Transformer::PhaseSeconds sum;
  for (const model::Transformer* m : models.stages) {
    const model::Transformer::PhaseSeconds& p = m->phase_seconds();
    sum.forward += p.forward;
    sum.backward += p.backward;
    sum.forward_communication += p.forward_communication;
    sum.backward_communication += p.backward_communication;
  }
  return sum;
}

void log_parallelism(const RunConfig& rc, const TrainState& state,
                     const parallel::ModelGroups& groups, const comm::Communicator& dp) {
  const TrainConfig& tc = rc.train;
  if (dp.size() > 1) {
    const std::string buckets =
        tc.zero < 2 ? fmt::format("{} all-reduce buckets of {:g} MiB overlapping backward",
                                  state.bucket_count(), rc.dist.bucket_mb)
                    : std::string("gradients reduce-scattered block by block");
    spdlog::info("data parallel: {} ranks, ZeRO stage {}, {} sequences each per micro-batch, {}",
                 dp.size(), tc.zero, tc.batch_size / dp.size(), buckets);
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
}

void log_pipeline(const RunConfig& rc, const parallel::PipelineTable& table,
                  const TrainState& state) {
  const comm::MeshShape& mesh = rc.mesh;
  if (mesh.pp == 1) return;
  const parallel::PipelineSimulation sim = parallel::simulate_pipeline(table);
  std::string blocks;
  for (const int64_t n : parallel::stage_blocks(rc.model, table.stages(), mesh.pp_layers)) {
    blocks += fmt::format("{}{}", blocks.empty() ? "" : ",", n);
  }
  std::string mine;
  for (int k = 0; k < state.stages(); ++k) {
    const model::ModelLayout& l = state.layout(k);
    mine += fmt::format("{}blocks {}-{}", k == 0 ? "" : ", ", l.first_block,
                        l.first_block + int64_t(l.blocks.size()) - 1);
  }
  spdlog::info(
      "pipeline: {} ranks, {} schedule, {} stage(s) per rank, {} micro-batches (train.grad_accum), "
      "blocks per stage {}, simulated bubble {:.1f}% | this rank: {}",
      mesh.pp, comm::pipeline_schedule_name(table.kind), table.virtual_stages, table.micro_batches,
      blocks, 100 * sim.bubble, mine);
}

// One call of train(): what it builds, in order, and the loop over steps.
class Run {
 public:
  Run(const Config& config, const fs::path& out_dir);
  TrainSummary train();

 private:
  struct StepResult {
    double loss = 0, aux_loss = 0, grad_norm = 0, data_wait = 0, comm_wait = 0;
    // Compute seconds of the forwards and backwards, and what they waited for: the model's
    // collectives and, in a pipeline, messages between stages.
    double forward = 0, backward = 0, model_comm = 0, pipeline_wait = 0, optimizer = 0;
    double loss_scale = 1;
    std::vector<std::vector<int64_t>> expert_tokens;  // MoE: [layer][expert] of the last forward
    int64_t dropped = 0;
    bool f16_skipped = false;  // the loss scaler skipped it: not the guard's concern
    DivergenceGuard::Verdict verdict = DivergenceGuard::Verdict::kApply;
  };

  // Continues from the newest committed checkpoint, if any; returns its step.
  int64_t resume();
  // Restores the state, the data position and the step's bookkeeping of a checkpoint; returns
  // its manifest.
  ckpt::Manifest restore(const fs::path& step_dir);
  StepResult run_step(int64_t step, double lr);
  // A step's micro-batches through the model (through the pipeline's schedule when there is
  // one): their summed cross-entropy and MoE auxiliary loss on every rank of the replica.
  std::pair<double, double> forward_backward(StepResult& r, float loss_scale);
  void moe_statistics(StepResult& r);
  double batch_loss(const int32_t* inputs, const int32_t* targets, int64_t B);
  int64_t roll_back(int64_t done, const std::string& reason);
  nlohmann::json checkpoint_metadata() const;
  void save(int64_t step);
  std::pair<double, double> evaluate(int64_t step);
  // Records a step in the metrics (every rank) and returns the MFU it derived.
  TrainMetrics::Derived record(int64_t done, double lr, const StepResult& r, double seconds,
                               double stall_in_step, double stall_since_last);
  std::string step_line(int64_t done, double lr, const StepResult& r,
                        const TrainMetrics::Derived& d) const;
  std::string breakdown_line(const TrainMetrics::Derived& d) const;
  void start_metrics(const std::vector<RankMemoryBytes>& memory);
  void trace_step(int64_t step, bool done);
  void open_loader(int64_t samples_consumed);

  const Config config_;
  const fs::path out_dir_;
  const RunConfig rc_;
  const std::unique_ptr<RunFolderLock> lock_;
  const TrainConfig& tc_;
  comm::Communicator& world_;
  const comm::Mesh mesh_;
  comm::Communicator& dp_;
  const bool lead_;  // rank 0 alone writes logs, metrics, the resolved config and checkpoints
  const int64_t local_batch_;
  data::Dataset dataset_;
  parallel::ModelGroups groups_;
  const kernels::DeviceContext device_;  // where the model and the training state live
  TrainState state_;
  const parallel::PipelineTable table_;  // one rank's plain sequence of micro-batches without pp
  parallel::StageModels models_;         // this rank's stages
  std::optional<parallel::PipelineRuntime> pipeline_;
  std::vector<int32_t> micro_tokens_;  // a pipelined step's inputs and targets
  std::vector<parallel::MicroBatch> micro_batches_;
  const fs::path ckpt_dir_;
  Checkpointer checkpointer_;
  DivergenceGuard guard_;
  DynamicLossScaler scaler_;
  std::optional<data::Loader> loader_;
  std::optional<Evaluator> evaluator_;
  std::optional<TrainMetrics> metrics_;
  std::optional<obs::MetricsServer> metrics_server_;
  std::vector<double> rank_figures_;  // every rank's step seconds and resident bytes, gathered
  std::optional<Goodput> goodput_;
  nlohmann::json tokenizer_;
  std::set<int64_t> nan_gradient_steps_;  // still to inject
};

// Text is prepared by rank 0; the others open what it wrote.
data::Dataset open_data(const RunConfig& rc, const fs::path& out_dir, comm::Communicator& world) {
  const bool lead = world.rank() == 0;
  if (!lead) world.barrier();
  data::Dataset d = open_training_data(rc, out_dir);
  if (lead) world.barrier();
  return d;
}

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
      lead_(world_.rank() == 0),
      local_batch_(tc_.batch_size / dp_.size()),
      dataset_(open_data(rc_, out_dir, world_)),
      groups_(mesh_, rc_.model, rc_.mesh.sequence_parallel),
      device_(train_device(tc_)),
      state_(device_.context(), rc_.model, tc_, mesh_, groups_.parallel().sharding,
             int64_t(rc_.dist.bucket_mb * 1024 * 1024), pipeline_boundaries(rc_)),
      table_(
          parallel::run_pipeline_table(rc_.model, rc_.mesh, state_.boundaries(), tc_.grad_accum)),
      models_(parallel::build_stage_models(rc_.model, table_, mesh_.coords().pp,
                                           state_.boundaries(), local_batch_, tc_.seq_len,
                                           {.context = &device_.context(),
                                            .precision = tc_.precision,
                                            .recompute = tc_.recompute,
                                            .parallel = &groups_.parallel()},
                                           stage_stores(state_))),
      ckpt_dir_(out_dir / "checkpoints"),
      checkpointer_(ckpt_dir_, rc_.checkpoint, world_),
      guard_(rc_.guard),
      scaler_(tc_.loss_scale, tc_.loss_scale_growth_interval),
      tokenizer_(tokenizer_metadata(dataset_, out_dir)),
      nan_gradient_steps_(rc_.fault.nan_gradient_steps.begin(),
                          rc_.fault.nan_gradient_steps.end()) {
  if (rc_.mesh.pp > 1) {
    pipeline_.emplace(table_, mesh_.pp(), models_.stages, models_.slots);
    const int64_t n = local_batch_ * tc_.seq_len;
    micro_tokens_.resize(size_t(2 * n * tc_.grad_accum));
    for (int64_t m = 0; m < tc_.grad_accum; ++m) {
      const int32_t* at = micro_tokens_.data() + 2 * n * m;
      micro_batches_.push_back({at, at + n});
    }
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
  evaluator_.emplace(dataset_.val, tc_, dp_);
  start_metrics(memory);
  Preemption preemption(rc_.checkpoint.preempt_timeout_s, world_.rank(), world_.size());

  TrainSummary summary;
  std::tie(summary.first_val_loss, summary.final_val_bits_per_byte) = evaluate(start_step);
  summary.final_val_loss = summary.first_val_loss;
  const auto run_start = Clock::now();
  int64_t step = start_step;
  // A save's stall falls between two steps: each step's record counts what came since the last.
  double stall_counted = checkpointer_.stall_seconds();
  while (step < tc_.steps) {
    trace_step(step + 1, false);
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
    const TrainMetrics::Derived derived = record(done, lr, r, seconds, stall_in_step, stall);
    if (done % tc_.log_every == 0 || done == tc_.steps) {
      const double elapsed = std::chrono::duration<double>(Clock::now() - run_start).count();
      const double eta = elapsed / double(done - start_step) * double(tc_.steps - done);
      spdlog::info("{} | ETA {}", step_line(done, lr, r, derived), format_duration(eta));
      spdlog::info("{}", breakdown_line(derived));
    }
    trace_step(done, true);
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
  spdlog::info(
      "held-out loss {:.4f} -> {:.4f} nats, {:.4f} bits/byte (ln(vocab) {:.4f}, unigram entropy "
      "{:.4f})",
      summary.first_val_loss, summary.final_val_loss, summary.final_val_bits_per_byte,
      std::log(double(rc_.model.vocab_size)), unigram);
  spdlog::info("checkpoint: {}", summary.checkpoint.string());
  const GoodputAccount g = goodput_->account();
  spdlog::info(
      "goodput {:.1f}% of {} over {} attempt(s): steps {:.1f} s, checkpoint stalls {:.2f} s, "
      "evaluation {:.1f} s, steps trained again {:.1f} s, start-up and restarts {:.1f} s",
      100 * g.goodput(), format_duration(g.wall_s), g.attempts, g.step_s, g.stall_s, g.eval_s,
      g.recomputed_s, g.lost_s());
  if (lead_) goodput_->write();
  metrics_->event({{"step", tc_.steps}, {"goodput", g.to_json()}});
  return summary;
}

int64_t Run::resume() {
  std::optional<fs::path> latest = ckpt::find_latest(ckpt_dir_);
  if (latest && ckpt::read_manifest(*latest).metadata.contains("imported_from")) {
    // Weights from `tessera convert import` carry no optimizer state or data position: the run
    // fine-tunes them from step 0 with fresh AdamW moments.
    state_.load(*latest, /*with_optimizer=*/false);
    spdlog::info("fine-tuning the imported weights of {}", latest->string());
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
  state_.load(step_dir, /*with_optimizer=*/true);
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  const nlohmann::json& meta = manifest.metadata;
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

Run::StepResult Run::run_step(int64_t step, double lr) {
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
  const auto [loss, aux] =
      forward_backward(r, float(backward_scale / double(tc_.grad_accum * dp_.size())));
  double losses[2] = {loss, aux};
  r.comm_wait = state_.reduce_gradients();
  if (dp_.size() > 1) {
    // The first collective after the gradients' reduction waits for the slowest rank to reach it.
    const auto reduce_start = Clock::now();
    dp_.all_reduce(losses, 2);
    r.comm_wait += std::chrono::duration<double>(Clock::now() - reduce_start).count();
  }
  if (rc_.model.is_moe()) moe_statistics(r);
  r.loss = losses[0] / double(tc_.grad_accum * dp_.size());
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

std::pair<double, double> Run::forward_backward(StepResult& r, float loss_scale) {
  const model::Transformer::PhaseSeconds before = phase_seconds(models_);
  // The forwards' and backwards' compute, and the collectives inside them.
  const auto count_phases = [&] {
    const model::Transformer::PhaseSeconds after = phase_seconds(models_);
    r.model_comm = after.forward_communication - before.forward_communication +
                   after.backward_communication - before.backward_communication;
    r.forward = after.forward - before.forward -
                (after.forward_communication - before.forward_communication);
    r.backward = after.backward - before.backward -
                 (after.backward_communication - before.backward_communication);
  };
  const auto next_batch = [&]() -> const data::Batch& {
    const trace::Span span("data wait", "step");
    const data::Batch& batch = loader_->next();
    r.data_wait += loader_->last_wait_seconds();
    return batch;
  };
  if (!pipeline_) {
    model::Transformer& model = *models_.stages.front();
    double losses[2] = {0, 0};
    for (int64_t micro = 0; micro < tc_.grad_accum; ++micro) {
      const data::Batch& batch = next_batch();
      state_.begin_micro_step(micro + 1 == tc_.grad_accum);
      losses[0] += model.forward_backward(batch.inputs, batch.targets, local_batch_, tc_.seq_len,
                                          loss_scale);
      losses[1] += model.aux_loss();
    }
    count_phases();
    return {losses[0], losses[1]};
  }
  const int64_t n = local_batch_ * tc_.seq_len;
  for (int64_t micro = 0; micro < tc_.grad_accum; ++micro) {
    const data::Batch& batch = next_batch();
    int32_t* at = micro_tokens_.data() + 2 * n * micro;
    std::copy_n(batch.inputs, n, at);
    std::copy_n(batch.targets, n, at + n);
  }
  state_.begin_micro_step(false);
  const auto start = Clock::now();
  double losses[2] = {pipeline_->run(micro_batches_, local_batch_, tc_.seq_len, loss_scale),
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
  if (!pipeline_) return models_.stages.front()->forward(inputs, targets, B, tc_.seq_len);
  double loss = pipeline_->evaluate({inputs, targets}, B, tc_.seq_len);
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
  metrics_->event({{"step", done}, {"rolled_back_to", step}, {"reason", reason}});
  return step;
}

nlohmann::json Run::checkpoint_metadata() const {
  return {{"config", config_.to_json()},
          {"model", model::architecture_name(rc_.model.arch)},
          {"tokenizer", tokenizer_},
          {"samples_consumed", loader_->position()},
          {"optimizer_steps", state_.steps_taken()},
          {"loss_scale", scaler_.scale()},
          {"skipped_steps", scaler_.skipped_steps()},
          {"guard", guard_.state()},
          {"goodput", goodput_->account().to_json()}};
}

void Run::save(int64_t step) {
  const trace::Span span("checkpoint", "step");
  checkpointer_.save(step, state_, checkpoint_metadata());
}

// Loss per byte of text, comparable across tokenizers: nats per token times tokens per byte.
std::pair<double, double> Run::evaluate(int64_t step) {
  const auto t0 = Clock::now();
  const data::DatasetSplit& val_split = dataset_.manifest.val;
  const double tokens_per_byte = double(val_split.tokens) / double(val_split.bytes);
  const double val =
      evaluator_->mean_loss([&](const int32_t* inputs, const int32_t* targets, int64_t B) {
        return batch_loss(inputs, targets, B);
      });
  const double bits_per_byte = val * tokens_per_byte / std::log(2.0);
  spdlog::info("step {:>6} | held-out loss {:.4f} | {:.4f} bits/byte", step, val, bits_per_byte);
  metrics_->held_out(step, val, bits_per_byte);
  goodput_->add_eval(std::chrono::duration<double>(Clock::now() - t0).count());
  return {val, bits_per_byte};
}

// Every rank keeps the metrics (it may serve them); rank 0 also writes metrics.jsonl.
void Run::start_metrics(const std::vector<RankMemoryBytes>& memory) {
  const model::ModelConfig& m = rc_.model;
  const auto [peak, peak_source] = job_peak_flops(tc_, device_.context().device, world_);
  const model::FlopsPerToken flops = model::flops_per_token(m, tc_.seq_len, tc_.recompute);
  RunDescription run{.name = out_dir_.filename().string(),
                     .model = fmt::format("{}, {} layers, d_model {}, {:.2f}M parameters",
                                          model::architecture_name(m.arch), m.n_layer, m.d_model,
                                          double(model::count_parameters(m).total) / 1e6),
                     .precision = std::string(model::precision_name(tc_.precision)),
                     .ranks = world_.size(),
                     .peak_flops = peak,
                     .peak = peak_source,
                     .flops_per_token = flops.model,
                     .hardware_flops_per_token = flops.hardware,
                     .memory = memory};
  spdlog::info(
      "MFU: {:.3g} model FLOPs per token ({:.3g} run, recomputation included) over a "
      "peak of {:.1f} GFLOP/s for the job, {}",
      flops.model, flops.hardware, peak / 1e9, peak_source);
  metrics_.emplace(run, lead_ ? std::optional(out_dir_ / "metrics.jsonl") : std::nullopt);
  rank_figures_.assign(size_t(2 * world_.size()), 0.0);
  const ObsConfig& o = rc_.obs;
  if (o.metrics_port < 0 || !(lead_ || o.metrics_all_ranks)) return;
  const int port =
      int(o.metrics_port) + (o.metrics_all_ranks && o.metrics_port > 0 ? world_.rank() : 0);
  TrainMetrics& metrics = *metrics_;
  metrics_server_.emplace(
      o.metrics_host, port,
      [&metrics](std::string_view path) -> std::optional<obs::HttpContent> {
        if (path == "/")
          return obs::HttpContent{"text/html; charset=utf-8", std::string(obs::live_page())};
        if (path == "/metrics") {
          return obs::HttpContent{"text/plain; version=0.0.4; charset=utf-8", metrics.prometheus()};
        }
        if (path == "/history.json")
          return obs::HttpContent{"application/json", metrics.history_json()};
        if (path == "/health") return obs::HttpContent{"text/plain", "ok\n"};
        return std::nullopt;
      },
      "--metrics-port / obs.metrics_port");
  spdlog::log(lead_ ? spdlog::level::info : spdlog::level::warn,
              "{}metrics: http://{}:{}/ (live page), /metrics (Prometheus), /health",
              world_.size() > 1 ? fmt::format("rank {}: ", world_.rank()) : std::string(),
              o.metrics_host, metrics_server_->port());
}

// Starts the trace before the first step of obs.trace_steps and writes it after the last.
void Run::trace_step(int64_t step, bool done) {
  const ObsConfig& o = rc_.obs;
  if (!o.tracing()) return;
  trace::Recorder& recorder = trace::Recorder::instance();
  if (!done && step == o.trace_first) {
    // Room for every span of the traced steps: each block's forward and backward (and weight
    // gradient) per micro-batch with a few collectives each, and the step's own spans.
    const int64_t per_step = 8 * (rc_.model.n_layer + 4) * tc_.grad_accum + 256;
    recorder.start(
        size_t(std::min<int64_t>(per_step * (o.trace_last - o.trace_first + 1), int64_t(1) << 22)));
  }
  if (done && step == o.trace_last && recorder.on()) {
    int64_t dropped = 0;
    const std::vector<trace::Event> events = recorder.stop(dropped);
    const fs::path path = out_dir_ / "trace" / fmt::format("rank-{}.json.gz", world_.rank());
    obs::write_chrome_trace(path, events, world_.rank(), dropped);
    if (lead_) {
      spdlog::info("trace of steps {} to {}: {} (one per rank; open in ui.perfetto.dev)",
                   o.trace_first, o.trace_last, (out_dir_ / "trace").string());
    }
  }
}

TrainMetrics::Derived Run::record(int64_t done, double lr, const StepResult& r, double seconds,
                                  double stall_in_step, double stall_since_last) {
  StepFigures f{.step = done,
                .loss = r.loss,
                .lr = lr,
                .grad_norm = r.grad_norm,
                .tokens = tc_.batch_size * tc_.seq_len * tc_.grad_accum,
                .step_seconds = seconds};
  StepBreakdown& b = f.breakdown;
  b.data_wait() = r.data_wait;
  b.forward() = r.forward;
  b.backward() = r.backward;
  b.optimizer() = r.optimizer;
  b.communication() = r.comm_wait + r.model_comm + r.pipeline_wait;
  b.checkpoint() = stall_in_step;
  b.other() = std::max(0.0, seconds - b.total());
  f.skipped = r.f16_skipped || r.verdict != DivergenceGuard::Verdict::kApply;

  // Every rank's step time and resident memory, for the slowest rank and the memory per rank.
  std::fill(rank_figures_.begin(), rank_figures_.end(), 0.0);
  rank_figures_[2 * world_.rank()] = seconds;
  rank_figures_[2 * world_.rank() + 1] = resident_bytes();
  if (world_.size() > 1) world_.all_reduce(rank_figures_.data(), int64_t(rank_figures_.size()));
  f.rank_step_seconds.resize(size_t(world_.size()));
  f.rank_resident_bytes.resize(size_t(world_.size()));
  for (int i = 0; i < world_.size(); ++i) {
    f.rank_step_seconds[i] = rank_figures_[2 * i];
    f.rank_resident_bytes[i] = rank_figures_[2 * i + 1];
    if (f.rank_step_seconds[i] > f.rank_step_seconds[f.slowest_rank]) f.slowest_rank = i;
  }

  // The stall since the previous step includes a save made after it, which no step's time holds.
  nlohmann::json extra = {{"data_wait_s", r.data_wait}, {"checkpoint_stall_s", stall_since_last}};
  if (dp_.size() > 1) extra["comm_wait_s"] = r.comm_wait;
  if (rc_.mesh.tp > 1 || rc_.mesh.ep > 1) extra["model_comm_s"] = r.model_comm;
  if (tc_.precision == model::Precision::kF16) {
    extra["loss_scale"] = r.loss_scale;
    extra["skipped"] = f.skipped;
  }
  if (r.verdict != DivergenceGuard::Verdict::kApply) extra["skip_reason"] = guard_.reason();
  if (rc_.model.is_moe()) {
    extra["aux_loss"] = r.aux_loss;
    extra["expert_tokens"] = r.expert_tokens;
    extra["dropped_assignments"] = r.dropped;
  }
  return metrics_->step(f, extra);
}

std::string Run::step_line(int64_t done, double lr, const StepResult& r,
                           const TrainMetrics::Derived& d) const {
  std::string line = fmt::format(
      "step {:>6}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:.0f} tok/s | MFU {:.1f}% | "
      "data wait {:.1f} ms",
      done, tc_.steps, r.loss, lr, r.grad_norm, d.tokens_per_second, 100 * d.mfu,
      1e3 * r.data_wait);
  if (rc_.mesh.tp > 1 || rc_.mesh.ep > 1)
    line += fmt::format(" | tp/ep comm {:.1f} ms", 1e3 * r.model_comm);
  if (tc_.precision == model::Precision::kF16) {
    line += fmt::format(" | loss scale {:g}{}", r.loss_scale,
                        r.f16_skipped ? " (overflow, skipped)" : "");
  }
  if (r.verdict != DivergenceGuard::Verdict::kApply)
    line += fmt::format(" | skipped: {}", guard_.reason());
  if (rc_.model.is_moe()) {
    line += fmt::format(" | aux {:.4f} | dropped {}", r.aux_loss, r.dropped);
  }
  return line;
}

// Where the last step went on this rank, and which rank was slowest.
std::string Run::breakdown_line(const TrainMetrics::Derived& d) const {
  const StepFigures& last = metrics_->last_step();
  std::string parts;
  for (size_t i = 0; i < StepBreakdown::kParts.size(); ++i) {
    parts += fmt::format("{}{} {:.1f}", i == 0 ? "" : ", ", StepBreakdown::kParts[i],
                         1e3 * last.breakdown.seconds[i]);
  }
  std::string line =
      fmt::format("step {:>6} took {:.1f} ms{}: {} ms", last.step, 1e3 * last.step_seconds,
                  world_.size() > 1 ? fmt::format(" on rank {}", world_.rank()) : "", parts);
  if (world_.size() > 1) {
    line +=
        fmt::format(" | slowest rank {} ({:.1f} ms, {:+.1f}% over the median)", last.slowest_rank,
                    1e3 * last.rank_step_seconds[last.slowest_rank], 100 * d.slowest_margin);
  }
  return line;
}

}  // namespace

TrainSummary train(const Config& config, const fs::path& out_dir) {
  Run run(config, out_dir);
  return run.train();
}

}  // namespace tessera::train
