// Where a run's wall time goes over all its attempts, restarts included: training steps that
// count, checkpoint stalls, evaluation, steps trained again because a crash or a rollback threw
// their first run away, and the rest: start-up, restarts and the time between attempts. The
// account travels in two places: the run folder's goodput.json, which the lead rank rewrites
// after every step, and each checkpoint's metadata, as it stood when the checkpoint was taken.
// An attempt that resumes from a checkpoint knows from the two what the previous attempt lost.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace tessera::train {

struct GoodputAccount {
  double first_start = 0;  // Unix time of the first attempt's start
  double wall_s = 0, step_s = 0, stall_s = 0, eval_s = 0, recomputed_s = 0;
  int64_t attempts = 1, rollbacks = 0;

  double counted_s() const { return step_s + stall_s + eval_s; }
  // Start-up, restarts and the gaps between attempts.
  double lost_s() const { return wall_s - counted_s() - recomputed_s; }
  double goodput() const { return wall_s > 0 ? step_s / wall_s : 0; }

  nlohmann::json to_json() const;
  static GoodputAccount from_json(const nlohmann::json& json);
};

class Goodput {
 public:
  // `file`: goodput.json as the previous attempt left it, if it did; `at_checkpoint`: the account
  // saved with the checkpoint this attempt resumes from (null when it starts afresh).
  Goodput(const std::filesystem::path& file, const nlohmann::json& at_checkpoint);

  void add_step(double seconds) { account_.step_s += seconds; }
  void add_stall(double seconds) { account_.stall_s += seconds; }
  void add_eval(double seconds) { account_.eval_s += seconds; }
  // The state went back to a checkpoint taken with the account `at_checkpoint`: what was
  // counted since is trained again.
  void rolled_back(const nlohmann::json& at_checkpoint);

  // The account as of now.
  GoodputAccount account() const;
  // Rewrites goodput.json (lead rank only).
  void write() const;

 private:
  void resume_from(const GoodputAccount& before, const nlohmann::json& at_checkpoint);

  std::filesystem::path file_;
  GoodputAccount account_;
};

}  // namespace tessera::train
