#include "tessera/train/divergence_guard.h"

#include <algorithm>
#include <cmath>

namespace tessera::train {

DivergenceGuard::Verdict DivergenceGuard::judge(const StepHealth& h) {
  reason_.clear();
  if (!std::isfinite(h.loss)) {
    reason_ = fmt::format("the loss is {}", h.loss);
  } else if (h.overflow_at_floor) {
    reason_ = "f16 gradients overflow even at the smallest loss scale";
  } else if (!std::isfinite(h.grad_norm)) {
    reason_ = fmt::format("the gradient norm is {}", h.grad_norm);
  } else if (config_.loss_spike_factor > 0 && good_steps_ >= kSpikeWarmup &&
             h.loss > config_.loss_spike_factor * mean_loss_) {
    reason_ = fmt::format("the loss {:.4f} spikes above {:g} x its running mean {:.4f}", h.loss,
                          config_.loss_spike_factor, mean_loss_);
  }
  if (reason_.empty()) {
    mean_loss_ = good_steps_ == 0 ? h.loss : kMeanDecay * mean_loss_ + (1 - kMeanDecay) * h.loss;
    ++good_steps_;
    bad_in_a_row_ = 0;
    return Verdict::kApply;
  }
  ++bad_in_a_row_;
  return bad_in_a_row_ >= config_.max_bad_steps ? Verdict::kRollBack : Verdict::kSkip;
}

void DivergenceGuard::roll_back(int64_t step, const std::string& last_good) {
  if (rollbacks_ >= config_.max_rollbacks) {
    throw DivergedError(fmt::format(
        "training diverged: {} bad steps in a row up to step {} ({}), and all {} rollbacks "
        "(train.max_rollbacks) are spent; the last good checkpoint, {}, is untouched: lower "
        "train.lr, or resume from it with other data or settings",
        bad_in_a_row_, step, reason_, config_.max_rollbacks, last_good));
  }
  ++rollbacks_;
  bad_in_a_row_ = 0;
}

nlohmann::json DivergenceGuard::state() const {
  return {{"mean_loss", mean_loss_}, {"good_steps", good_steps_}, {"rollbacks", rollbacks_}};
}

void DivergenceGuard::restore(const nlohmann::json& state) {
  if (state.is_null()) return;
  mean_loss_ = state.value("mean_loss", 0.0);
  good_steps_ = state.value("good_steps", int64_t{0});
  // A rollback within the run restores an older state, but the rollbacks it spent stay spent.
  rollbacks_ = std::max(rollbacks_, state.value("rollbacks", int64_t{0}));
  bad_in_a_row_ = 0;
}

}  // namespace tessera::train
