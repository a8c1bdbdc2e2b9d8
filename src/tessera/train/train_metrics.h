// Every number a training run reports, each defined once (its Prometheus name, help and unit, and
// its key in metrics.jsonl), and every sink fed from that one definition: metrics.jsonl, the
// Prometheus text of /metrics and the history the live page draws. The log lines read the same
// figures.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/obs/metrics_log.h"
#include "tessera/obs/prometheus.h"

namespace tessera::train {

// Where a step's wall time went on one rank. Communication is what the step waited for (the
// data-parallel gradient reduction it could not hide and the loss's, tensor- and expert-parallel
// collectives, pipeline messages); forward and backward are compute without it; the optimizer's
// part clears the gradients, judges them (their norm) and updates; `other` is the bookkeeping
// between these.
struct StepBreakdown {
  static constexpr std::array<const char*, 7> kParts = {
      "data_wait", "forward", "backward", "optimizer", "communication", "checkpoint", "other"};
  std::array<double, kParts.size()> seconds{};

  double& data_wait() { return seconds[0]; }
  double& forward() { return seconds[1]; }
  double& backward() { return seconds[2]; }
  double& optimizer() { return seconds[3]; }
  double& communication() { return seconds[4]; }
  double& checkpoint() { return seconds[5]; }
  double& other() { return seconds[6]; }
  double total() const;
};

// A rank's memory by kind, as the memory model counts it.
struct RankMemoryBytes {
  static constexpr std::array<const char*, 4> kKinds = {"parameters", "gradients", "optimizer",
                                                        "activations"};
  std::array<double, kKinds.size()> bytes{};
};

// What the run is, written once: the first record of metrics.jsonl and the page's header.
struct RunDescription {
  std::string name, model, precision;
  int ranks = 1;
  double peak_flops = 0;  // FLOP/s of all ranks' devices together
  std::string peak;       // where the peak came from
  double flops_per_token = 0, hardware_flops_per_token = 0;
  std::vector<RankMemoryBytes> memory{};  // [rank]
};

// One optimizer step's figures, on the rank that reports them.
struct StepFigures {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;  // trained in the step, over all ranks
  double step_seconds = 0;
  StepBreakdown breakdown{};
  bool skipped = false;
  // Over all ranks: each one's step time and resident memory; the slowest's number.
  std::vector<double> rank_step_seconds{}, rank_resident_bytes{};
  int slowest_rank = 0;
};

class TrainMetrics {
 public:
  // `jsonl`, when given, receives every record (rank 0's run writes metrics.jsonl).
  TrainMetrics(const RunDescription& run, std::optional<std::filesystem::path> jsonl);

  // Records a step: the figures and, merged into its record, `extra` keys (the loss scale, a skip
  // reason, MoE statistics). Returns the tokens/s, MFU and HFU it derived.
  struct Derived {
    double tokens_per_second = 0, mfu = 0, hfu = 0, slowest_margin = 0;
  };
  Derived step(const StepFigures& figures, const nlohmann::json& extra = {});
  void held_out(int64_t step, double loss, double bits_per_byte);
  // Any other record (a rollback, the goodput summary): metrics.jsonl and the history only.
  void event(const nlohmann::json& record);

  const RunDescription& run() const { return run_; }
  const StepFigures& last_step() const { return last_; }
  // Prometheus text exposition of every metric.
  std::string prometheus() const { return registry_.render(); }
  // {"records": [...]}: the records so far, oldest first; long runs keep every held-out record
  // and an evenly thinned subset of the others.
  std::string history_json() const;

 private:
  void keep(const nlohmann::json& record);

  RunDescription run_;
  StepFigures last_;
  std::optional<obs::JsonlWriter> jsonl_;
  obs::Registry registry_;
  obs::Gauge &step_, &loss_, &held_out_loss_, &lr_, &grad_norm_, &tokens_per_second_, &mfu_, &hfu_,
      &slowest_rank_;
  obs::Counter &tokens_total_, &skipped_total_;
  obs::Histogram& step_seconds_;
  std::vector<obs::Gauge*> breakdown_;
  std::vector<obs::Gauge*> rank_step_seconds_, rank_resident_bytes_;
  mutable std::mutex history_mutex_;
  std::deque<std::string> history_;
};

// This process's resident memory in bytes (Linux), 0 where unknown.
double resident_bytes();

}  // namespace tessera::train
