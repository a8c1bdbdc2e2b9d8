#include "tessera/train/run_report.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "tessera/comm/world.h"
#include "tessera/core/threading.h"
#include "tessera/core/trace.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/peak_flops.h"
#include "tessera/model/flops.h"
#include "tessera/model/frozen_parameters.h"
#include "tessera/obs/chrome_trace.h"
#include "tessera/obs/live_page.h"
#include "tessera/parallel/pipeline_simulator.h"
#include "tessera/parallel/zero_memory.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

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

}  // namespace

std::string format_duration(double seconds) {
  int64_t s = std::llround(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, s % 3600 / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

void log_model(const RunConfig& rc, const model::Transformer& model) {
  const model::ModelConfig& m = rc.model;
  const model::ParameterCount count = model::count_parameters(m);
  std::string shape =
      fmt::format("{}, {} layers, {} heads ({} key/value), d_model {}, ffn {}", enum_name(m.arch),
                  m.n_layer, m.n_head, m.kv_heads(), m.d_model, m.ffn());
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
    matmul = fmt::format("{} ({})", enum_name(tc.precision), kernels::low_precision_gemm_path(low));
  }
  const double mib = 1024.0 * 1024.0;
  spdlog::info(
      "precision: matmuls {}; master weights and AdamW f32 | recompute {}: {:.2f} MiB of "
      "activations kept per layer, {:.2f} MiB working set",
      matmul, enum_name(tc.recompute), model.saved_activation_bytes_per_layer() / mib,
      model.working_activation_bytes() / mib);
}

// Every rank's bytes, logged by rank 0 next to what the ZeRO formula predicts for its pipeline
// stages: their dense parameters over the data- and context-parallel ranks, a mixture's expert
// stacks over the ranks that hold the same experts. Returns them, for the metrics.
std::vector<RankMemoryBytes> log_memory(const TrainState& state, const runtime::StageModels& models,
                                        const comm::Mesh& mesh, const TrainConfig& tc) {
  constexpr int kFields = 8;
  comm::Communicator& world = mesh.world();
  const comm::MeshShape& shape = mesh.shape();
  const MemoryReport m = state.memory();
  double activations = 0, dense = 0, experts = 0, frozen = 0;
  for (const model::Transformer* stage : models.stages) {
    activations += double(stage->activation_bytes_total());
  }
  // A LoRA run trains its adapters (the "dense" group) and holds the rest frozen.
  for (int k = 0; k < state.stages(); ++k) {
    const model::ModelLayout& layout = state.layout(k);
    dense += double(layout.trained_dense());
    experts += double(layout.trained_experts());
    frozen += double(model::FrozenParameters::bytes(layout, tc.precision));
  }
  std::vector<double> all(size_t(kFields * world.size()), 0.0);
  const double mine[kFields] = {
      double(m.params), double(m.grads), double(m.optimizer), activations, double(m.working), dense,
      experts,          frozen};
  std::copy(mine, mine + kFields, all.begin() + kFields * world.rank());
  world.all_reduce(all.data(), int64_t(all.size()));
  const double mib = 1024.0 * 1024.0;
  const int64_t replicas = shape.dp * shape.cp;
  std::vector<RankMemoryBytes> memory(size_t(world.size()));
  for (int r = 0; r < world.size(); ++r) {
    const double* v = all.data() + kFields * r;
    memory[r].bytes = {v[0], v[1], v[2], v[3]};
    const double formula =
        parallel::zero_model_state(int(tc.zero), tc.precision, v[5], replicas).total() +
        parallel::zero_model_state(int(tc.zero), tc.precision, v[6], shape.dp / shape.ep).total() +
        v[7];
    const double model_state = v[0] + v[1] + v[2];
    const std::string expert_share =
        v[6] > 0
            ? fmt::format(" and {:.0f} expert parameters over {} ranks", v[6], shape.dp / shape.ep)
            : std::string();
    const std::string frozen_share = v[7] > 0 ? " LoRA adapter" : "";
    const std::string frozen_bytes =
        v[7] > 0 ? fmt::format(", plus a frozen model of {:.0f} B", v[7]) : std::string();
    const std::string stage =
        shape.pp > 1 ? fmt::format(" (pipeline rank {})", mesh.coords_of(r).pp) : std::string();
    spdlog::info(
        "memory rank {}{}: model state {:.0f} B = {:.3f} x ZeRO-{} formula {:.0f} B ({:.0f} {}{} "
        "parameters over {} ranks{}{}) | parameters {:.0f} B, gradients {:.0f} B, optimizer {:.0f} "
        "B, activations {:.0f} B ({:.2f} MiB in all), working buffers {:.2f} MiB",
        r, stage, model_state, model_state / formula, tc.zero, formula, v[5],
        enum_name(tc.precision), frozen_share, replicas, expert_share, frozen_bytes, v[0], v[1],
        v[2], v[3], (v[0] + v[1] + v[2] + v[3]) / mib, v[4] / mib);
  }
  return memory;
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
  if (rc.mesh.cp > 1) {
    spdlog::info(
        "context parallel: {} ranks, each holding 2 chunks of {} of every sequence's {} tokens "
        "(an early and a late one), keys and values all-gathered in every block{}",
        rc.mesh.cp, tc.seq_len / (2 * rc.mesh.cp), tc.seq_len,
        rc.mesh.dp > 1 ? "; gradients reduced over dp x cp" : "");
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
      mesh.pp, enum_name(table.kind), table.virtual_stages, table.micro_batches, blocks,
      100 * sim.bubble, mine);
}

RunReport::RunReport(const RunConfig& rc, const fs::path& out_dir, comm::Communicator& world,
                     int data_parallel_ranks)
    : rc_(rc),
      tc_(rc.train),
      out_dir_(out_dir),
      world_(world),
      data_parallel_ranks_(data_parallel_ranks),
      lead_(world.rank() == 0) {}

void RunReport::start(const kernels::Device& device, const std::vector<RankMemoryBytes>& memory) {
  const model::ModelConfig& m = rc_.model;
  const auto [peak, peak_source] = job_peak_flops(tc_, device, world_);
  const model::FlopsPerToken flops = model::flops_per_token(m, tc_.seq_len, tc_.recompute);
  RunDescription run{
      .name = out_dir_.filename().string(),
      .model = fmt::format("{}, {} layers, d_model {}, {:.2f}M parameters", enum_name(m.arch),
                           m.n_layer, m.d_model, double(model::count_parameters(m).total) / 1e6),
      .precision = std::string(enum_name(tc_.precision)),
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

void RunReport::trace_step(int64_t step, bool done) {
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

TrainMetrics::Derived RunReport::record(int64_t done, double lr, const StepResult& r,
                                        double seconds, double stall_in_step,
                                        double stall_since_last, const std::string& skip_reason) {
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
  if (data_parallel_ranks_ > 1) extra["comm_wait_s"] = r.comm_wait;
  if (rc_.mesh.tp > 1 || rc_.mesh.ep > 1) extra["model_comm_s"] = r.model_comm;
  if (tc_.precision == model::Precision::kF16) {
    extra["loss_scale"] = r.loss_scale;
    extra["skipped"] = f.skipped;
  }
  if (r.verdict != DivergenceGuard::Verdict::kApply) extra["skip_reason"] = skip_reason;
  if (rc_.model.is_moe()) {
    extra["aux_loss"] = r.aux_loss;
    extra["expert_tokens"] = r.expert_tokens;
    extra["dropped_assignments"] = r.dropped;
  }
  return metrics_->step(f, extra);
}

std::string RunReport::step_line(int64_t done, double lr, const StepResult& r,
                                 const TrainMetrics::Derived& d,
                                 const std::string& skip_reason) const {
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
    line += fmt::format(" | skipped: {}", skip_reason);
  if (rc_.model.is_moe()) {
    line += fmt::format(" | aux {:.4f} | dropped {}", r.aux_loss, r.dropped);
  }
  return line;
}

// Where the last step went on this rank, and which rank was slowest.
std::string RunReport::breakdown_line(const TrainMetrics::Derived& d) const {
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

void RunReport::log_step(int64_t done, double lr, const StepResult& r,
                         const TrainMetrics::Derived& d, double eta_seconds,
                         const std::string& skip_reason) const {
  spdlog::info("{} | ETA {}", step_line(done, lr, r, d, skip_reason), format_duration(eta_seconds));
  spdlog::info("{}", breakdown_line(d));
}

}  // namespace tessera::train
