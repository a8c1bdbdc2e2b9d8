// Decides, step by step, whether an update may be applied. A step whose loss or gradients are
// not finite, whose f16 gradients overflow even at the smallest loss scale, or whose loss spikes
// above a multiple of its running mean is skipped (its update is never applied, so the state
// stays that of the last good step); `max_bad_steps` such steps in a row call for a rollback to
// the last committed checkpoint, and when `max_rollbacks` are spent the run ends with an error,
// as large runs otherwise do by hand.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"

namespace tessera::train {

struct GuardConfig {
  double loss_spike_factor = 0;  // 0: no spike detection
  int64_t max_bad_steps = 3;
  int64_t max_rollbacks = 3;
};

// What a diverged run throws: restarting it from its checkpoint would diverge again, so a
// supervisor does not retry it.
class DivergedError : public Error {
 public:
  using Error::Error;
};

// What one step's figures say, the same on every rank since they are reduced over all of them.
struct StepHealth {
  double loss = 0;
  double grad_norm = 0;
  bool overflow_at_floor = false;  // f16: gradients overflowed at the smallest loss scale
};

class DivergenceGuard {
 public:
  enum class Verdict { kApply, kSkip, kRollBack };

  explicit DivergenceGuard(const GuardConfig& config) : config_(config) {}

  Verdict judge(const StepHealth& health);
  // Why the last judged step was bad ("" after a good one).
  const std::string& reason() const { return reason_; }
  int64_t bad_in_a_row() const { return bad_in_a_row_; }
  // Records a rollback; throws DivergedError naming `last_good` when none is left.
  void roll_back(int64_t step, const std::string& last_good);
  int64_t rollbacks() const { return rollbacks_; }

  // For checkpoints, so that a resumed run judges its steps as the uninterrupted one would.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  // The running mean needs this many good steps before a spike can be judged against it.
  static constexpr int64_t kSpikeWarmup = 10;
  static constexpr double kMeanDecay = 0.9;

  GuardConfig config_;
  double mean_loss_ = 0;
  int64_t good_steps_ = 0, bad_in_a_row_ = 0, rollbacks_ = 0;
  std::string reason_;
};

}  // namespace tessera::train
