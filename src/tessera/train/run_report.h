// What a training run reports about itself: its start-up lines (model, precision, parallelism,
// pipeline, memory per rank against the ZeRO formulas), each step's metrics and log lines, the
// metrics server, and the trace of chosen steps. The trainer hands it figures; it computes none
// of the training.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/mesh.h"
#include "tessera/kernels/context.h"
#include "tessera/model/transformer.h"
#include "tessera/obs/metrics_server.h"
#include "tessera/parallel/model_parallel.h"
#include "tessera/parallel/pipeline_schedule.h"
#include "tessera/parallel/pipeline_stages.h"
#include "tessera/runtime/pipeline_runtime.h"
#include "tessera/train/divergence_guard.h"
#include "tessera/train/run_config.h"
#include "tessera/train/train_metrics.h"
#include "tessera/train/train_state.h"

namespace tessera::train {

// What one optimizer step did, as the trainer measured it.
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

std::string format_duration(double seconds);  // "1h02m", "3m05s", "42s"

// The start-up lines, on rank 0.
void log_model(const RunConfig& rc, const model::Transformer& model);
void log_parallelism(const RunConfig& rc, const TrainState& state,
                     const parallel::ModelGroups& groups, const comm::Communicator& dp);
void log_pipeline(const RunConfig& rc, const parallel::PipelineTable& table,
                  const TrainState& state);
// Every rank's bytes, logged by rank 0 next to what the ZeRO formula predicts for its pipeline
// stages: their dense parameters over the data-parallel ranks, a mixture's expert stacks over the
// ranks that hold the same experts. Collective over the mesh's world; returns them, for the
// metrics.
std::vector<RankMemoryBytes> log_memory(const TrainState& state, const runtime::StageModels& models,
                                        const comm::Mesh& mesh, const TrainConfig& tc);

// Each step's metrics on every rank (any may serve them), metrics.jsonl and the log lines on
// rank 0, and the trace of obs.trace_steps.
class RunReport {
 public:
  RunReport(const RunConfig& rc, const std::filesystem::path& out_dir, comm::Communicator& world,
            int data_parallel_ranks);
  // Measures or looks up the peak MFU divides by (collective), opens the metrics and serves them
  // when obs.metrics_port asks.
  void start(const kernels::Device& device, const std::vector<RankMemoryBytes>& memory);
  TrainMetrics& metrics() { return *metrics_; }

  // Records a step (collective: every rank's step time and memory are gathered) and returns what
  // the metrics derived from it. skip_reason: the divergence guard's, for a skipped step.
  TrainMetrics::Derived record(int64_t done, double lr, const StepResult& r, double seconds,
                               double stall_in_step, double stall_since_last,
                               const std::string& skip_reason);
  // The step's progress line and where its time went, with the slowest rank.
  void log_step(int64_t done, double lr, const StepResult& r, const TrainMetrics::Derived& d,
                double eta_seconds, const std::string& skip_reason) const;
  // Starts the trace before the first step of obs.trace_steps and writes it after the last.
  void trace_step(int64_t step, bool done);

 private:
  std::string step_line(int64_t done, double lr, const StepResult& r,
                        const TrainMetrics::Derived& d, const std::string& skip_reason) const;
  std::string breakdown_line(const TrainMetrics::Derived& d) const;

  const RunConfig& rc_;
  const TrainConfig& tc_;
  const std::filesystem::path out_dir_;
  comm::Communicator& world_;
  const int data_parallel_ranks_;
  const bool lead_;
  std::optional<TrainMetrics> metrics_;
  std::optional<obs::MetricsServer> metrics_server_;
  std::vector<double> rank_figures_;  // every rank's step seconds and resident bytes, gathered
};

}  // namespace tessera::train
