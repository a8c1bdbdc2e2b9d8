#include "tessera/runtime/phase_clock.h"

namespace tessera::runtime {

PhaseSeconds& PhaseSeconds::operator+=(const PhaseSeconds& o) {
  forward += o.forward;
  backward += o.backward;
  forward_communication += o.forward_communication;
  backward_communication += o.backward_communication;
  return *this;
}

void PhaseClock::enter(Phase next) {
  const auto now = std::chrono::steady_clock::now();
  const double communication = model_.communication_seconds();
  if (phase_ != Phase::kIdle) {
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double in_collectives = communication - communication_start_;
    if (phase_ == Phase::kForward) {
      seconds_.forward += seconds;
      seconds_.forward_communication += in_collectives;
    } else {
      seconds_.backward += seconds;
      seconds_.backward_communication += in_collectives;
    }
  }
  phase_ = next;
  start_ = now;
  communication_start_ = communication;
}

}  // namespace tessera::runtime
