#include "tessera/train/train_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <numeric>

#include "tessera/obs/live_page.h"

namespace tessera::train {
namespace {

// Room for this many records in the history the live page draws (about a megabyte of JSON).
constexpr size_t kHistoryRecords = 4096;

std::vector<double> step_buckets() {
  std::vector<double> b;
  for (double s = 0.001; s < 1000; s *= 2) b.push_back(s);
  return b;
}

obs::Labels rank_label(int rank) { return {{"rank", std::to_string(rank)}}; }

}  // namespace

double StepBreakdown::total() const { return std::accumulate(seconds.begin(), seconds.end(), 0.0); }

TrainMetrics::TrainMetrics(const RunDescription& run, std::optional<std::filesystem::path> jsonl)
    : run_(run),
      step_(registry_.gauge("tessera_train_step", "Optimizer steps completed.")),
      loss_(registry_.gauge("tessera_train_loss",
                            "Training loss of the last step: mean cross-entropy in nats.")),
      held_out_loss_(registry_.gauge("tessera_train_held_out_loss",
                                     "Loss on the held-out data at the last evaluation, nats.")),
      lr_(registry_.gauge("tessera_train_learning_rate", "Learning rate of the last step.")),
      grad_norm_(registry_.gauge("tessera_train_grad_norm",
                                 "Global gradient norm of the last step, before clipping.")),
      tokens_per_second_(registry_.gauge("tessera_train_tokens_per_second",
                                         "Tokens trained per second in the last step, all ranks.")),
      mfu_(registry_.gauge("tessera_train_mfu_ratio",
                           "Model FLOPs utilisation of the last step: the model's FLOPs per "
                           "second over the ranks' peak (tessera_train_peak_flops).")),
      hfu_(registry_.gauge("tessera_train_hfu_ratio",
                           "Hardware FLOPs utilisation: as MFU, with recomputation counted.")),
      slowest_rank_(
          registry_.gauge("tessera_train_slowest_rank", "The rank whose last step took longest.")),
      tokens_total_(registry_.counter("tessera_train_tokens_total", "Tokens trained, all ranks.")),
      skipped_total_(registry_.counter("tessera_train_skipped_steps_total",
                                       "Steps whose update was skipped (overflow, divergence).")),
      step_seconds_(registry_.histogram("tessera_train_step_seconds",
                                        "Wall time of each optimizer step, seconds.",
                                        step_buckets())) {
  if (jsonl) jsonl_.emplace(*jsonl);
  registry_
      .gauge("tessera_train_peak_flops",
             "Peak FLOP/s of all ranks' devices together, which MFU divides by.")
      .set(run_.peak_flops);
  registry_.gauge("tessera_train_ranks", "Ranks of the run.").set(run_.ranks);
  for (const char* part : StepBreakdown::kParts) {
    breakdown_.push_back(&registry_.gauge("tessera_train_step_breakdown_seconds",
                                          "Where the last step's wall time went on this rank, "
                                          "seconds.",
                                          {{"part", part}}));
  }
  for (int r = 0; r < int(run_.memory.size()); ++r) {
    for (size_t k = 0; k < RankMemoryBytes::kKinds.size(); ++k) {
      registry_
          .gauge("tessera_train_memory_bytes",
                 "Memory a rank holds by kind, as the memory model counts it, bytes.",
                 {{"rank", std::to_string(r)}, {"kind", RankMemoryBytes::kKinds[k]}})
          .set(run_.memory[r].bytes[k]);
    }
  }
  for (int r = 0; r < run_.ranks; ++r) {
    rank_step_seconds_.push_back(&registry_.gauge(
        "tessera_train_rank_step_seconds", "Each rank's last step, seconds.", rank_label(r)));
    rank_resident_bytes_.push_back(&registry_.gauge(
        "tessera_train_resident_bytes", "Each rank's resident memory, bytes.", rank_label(r)));
  }

  nlohmann::json memory = nlohmann::json::object();
  for (int r = 0; r < int(run_.memory.size()); ++r) {
    nlohmann::json kinds = nlohmann::json::object();
    for (size_t k = 0; k < RankMemoryBytes::kKinds.size(); ++k) {
      kinds[RankMemoryBytes::kKinds[k]] = run_.memory[r].bytes[k];
    }
    memory[std::to_string(r)] = kinds;
  }
  event({{"step", 0},
         {"run",
          {{"name", run_.name},
           {"model", run_.model},
           {"precision", run_.precision},
           {"ranks", run_.ranks},
           {"peak_flops", run_.peak_flops},
           {"peak", run_.peak},
           {"flops_per_token", run_.flops_per_token},
           {"hardware_flops_per_token", run_.hardware_flops_per_token},
           {"memory_bytes", memory}}}});
}

TrainMetrics::Derived TrainMetrics::step(const StepFigures& f, const nlohmann::json& extra) {
  last_ = f;
  Derived d;
  d.tokens_per_second = double(f.tokens) / f.step_seconds;
  if (run_.peak_flops > 0) {
    d.mfu = d.tokens_per_second * run_.flops_per_token / run_.peak_flops;
    d.hfu = d.tokens_per_second * run_.hardware_flops_per_token / run_.peak_flops;
  }
  if (!f.rank_step_seconds.empty()) {
    std::vector<double> sorted = f.rank_step_seconds;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    const double median = sorted[sorted.size() / 2];
    d.slowest_margin = median > 0 ? f.rank_step_seconds[f.slowest_rank] / median - 1 : 0;
  }

  step_.set(double(f.step));
  loss_.set(f.loss);
  lr_.set(f.lr);
  grad_norm_.set(f.grad_norm);
  tokens_per_second_.set(d.tokens_per_second);
  mfu_.set(d.mfu);
  hfu_.set(d.hfu);
  slowest_rank_.set(f.slowest_rank);
  tokens_total_.inc(double(f.tokens));
  if (f.skipped) skipped_total_.inc();
  step_seconds_.observe(f.step_seconds);
  nlohmann::json breakdown = nlohmann::json::object();
  for (size_t i = 0; i < StepBreakdown::kParts.size(); ++i) {
    breakdown_[i]->set(f.breakdown.seconds[i]);
    breakdown[StepBreakdown::kParts[i]] = f.breakdown.seconds[i];
  }
  nlohmann::json resident = nlohmann::json::object();
  for (size_t r = 0; r < f.rank_step_seconds.size() && r < rank_step_seconds_.size(); ++r) {
    rank_step_seconds_[r]->set(f.rank_step_seconds[r]);
    rank_resident_bytes_[r]->set(f.rank_resident_bytes[r]);
    resident[std::to_string(r)] = f.rank_resident_bytes[r];
  }

  nlohmann::json record = {{"step", f.step},
                           {"loss", f.loss},
                           {"lr", f.lr},
                           {"grad_norm", f.grad_norm},
                           {"tokens_per_s", d.tokens_per_second},
                           {"step_s", f.step_seconds},
                           {"mfu", d.mfu},
                           {"hfu", d.hfu},
                           {"breakdown_s", breakdown},
                           {"slowest_rank", f.slowest_rank},
                           {"slowest_margin", d.slowest_margin},
                           {"resident_bytes", resident}};
  if (f.skipped) record["skipped"] = true;
  if (!extra.is_null()) record.update(extra);
  event(record);
  return d;
}

void TrainMetrics::held_out(int64_t step, double loss, double bits_per_byte) {
  held_out_loss_.set(loss);
  event({{"step", step}, {"val_loss", loss}, {"val_bits_per_byte", bits_per_byte}});
}

void TrainMetrics::event(const nlohmann::json& record) {
  if (jsonl_) jsonl_->write(record);
  keep(record);
}

void TrainMetrics::keep(const nlohmann::json& record) {
  std::string text = record.dump();
  std::lock_guard lock(history_mutex_);
  history_.push_back(std::move(text));
  if (history_.size() <= kHistoryRecords) return;
  // Halve the records but the run's description and the held-out losses, evenly.
  std::deque<std::string> kept;
  for (size_t i = 0; i < history_.size(); ++i) {
    const bool always = i == 0 || history_[i].find("\"val_loss\"") != std::string::npos;
    if (always || i % 2 == 0 || i + 1 == history_.size()) kept.push_back(std::move(history_[i]));
  }
  history_ = std::move(kept);
}

std::string TrainMetrics::history_json() const {
  std::string records = "[";
  {
    std::lock_guard lock(history_mutex_);
    for (size_t i = 0; i < history_.size(); ++i) {
      if (i > 0) records += ",";
      records += history_[i];
    }
  }
  records += "]";
  return obs::records_json(records);
}

double resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  double pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * double(sysconf(_SC_PAGESIZE));
}

}  // namespace tessera::train
