#include "tessera/plan/goodput.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tessera::plan {

Goodput expected_goodput(double state_bytes, int64_t chips, const Reliability& reliability) {
  Goodput g;
  g.checkpoint_s = state_bytes / (double(chips) * reliability.checkpoint_bytes_per_s_per_chip);
  if (reliability.failures_per_chip_hour <= 0) {
    g.mean_time_between_failures_s = std::numeric_limits<double>::infinity();
    g.interval_s = std::numeric_limits<double>::infinity();
    return g;
  }
  g.mean_time_between_failures_s = 3600 / (reliability.failures_per_chip_hour * double(chips));
  const double mtbf = g.mean_time_between_failures_s;
  g.interval_s = std::sqrt(2 * g.checkpoint_s * mtbf);
  // Per interval of training: one checkpoint; per failure: half an interval redone and a restart.
  const double lost =
      g.checkpoint_s / g.interval_s + (g.interval_s / 2 + reliability.restart_s) / mtbf;
  g.fraction = std::max(0.0, 1 - lost);
  return g;
}

}  // namespace tessera::plan
