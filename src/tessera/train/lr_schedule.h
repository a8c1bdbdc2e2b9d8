#pragma once

#include <cmath>
#include <cstdint>

#include "tessera/train/run_config.h"

namespace tessera::train {

// Linear warmup to lr over warmup_steps, then cosine decay to min_lr at the last step.
inline double learning_rate(int64_t step, const TrainConfig& c) {
  if (step < c.warmup_steps) return c.lr * double(step + 1) / double(c.warmup_steps);
  const int64_t decay_steps = c.steps - c.warmup_steps;
  if (decay_steps <= 1) return c.lr;
  const double progress = double(step - c.warmup_steps) / double(decay_steps - 1);
  return c.min_lr + 0.5 * (c.lr - c.min_lr) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tessera::train
