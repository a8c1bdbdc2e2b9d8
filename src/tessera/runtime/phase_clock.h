// The wall time a runner's passes spend in forwards and backwards, and of it inside the model's
// collectives: what a training step's breakdown is made of.
#pragma once

#include <chrono>

#include "tessera/model/transformer.h"

namespace tessera::runtime {

// Seconds in forwards (up to the loss) and in backwards (from the loss's gradient on), and of
// them inside the model's collectives.
struct PhaseSeconds {
  double forward = 0, backward = 0, forward_communication = 0, backward_communication = 0;
  PhaseSeconds& operator+=(const PhaseSeconds& o);
};

enum class Phase { kIdle, kForward, kBackward };

class PhaseClock {
 public:
  explicit PhaseClock(const model::Transformer& model) : model_(model) {}
  // Ends the phase under way, counting its time, and starts `next`.
  void enter(Phase next);
  // Since the clock was made.
  const PhaseSeconds& seconds() const { return seconds_; }

 private:
  const model::Transformer& model_;
  PhaseSeconds seconds_;
  Phase phase_ = Phase::kIdle;
  std::chrono::steady_clock::time_point start_;
  double communication_start_ = 0;
};

}  // namespace tessera::runtime
