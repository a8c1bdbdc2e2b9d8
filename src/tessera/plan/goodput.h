// What failures cost a long run: the share of its time spent on checkpoints, on work lost since
// the last one and on restarts, for a failure rate per chip-hour, with checkpoints at the
// interval that minimises the sum (Young and Daly's first-order optimum).
#pragma once

#include <cstdint>

namespace tessera::plan {

// The Llama 3 paper (Llama Team, "The Llama 3 Herd of Models", 2024, section 3.3.4): 419
// unexpected interruptions in a 54-day snapshot of pre-training on 16,384 H100 GPUs.
inline constexpr double kLlama3FailuresPerChipHour = 419.0 / (54.0 * 24.0 * 16384.0);
// Its storage (section 3.3.1): Tectonic sustains 2 TB/s for the same 16,384 GPUs.
inline constexpr double kLlama3CheckpointBytesPerSecondPerChip = 2e12 / 16384.0;

struct Reliability {
  double failures_per_chip_hour = kLlama3FailuresPerChipHour;
  double restart_s = 600;  // from a failure to training again: detection, relaunch, reload
  double checkpoint_bytes_per_s_per_chip = kLlama3CheckpointBytesPerSecondPerChip;
};

struct Goodput {
  double checkpoint_s = 0;  // writing one checkpoint, during which training waits
  double interval_s = 0;    // training time between checkpoints
  double mean_time_between_failures_s = 0;
  double fraction = 1;  // of the wall time that trains
};

// For a job of `chips` chips whose training state (master weights and optimizer moments) is
// `state_bytes` in all, written by every chip at once.
Goodput expected_goodput(double state_bytes, int64_t chips, const Reliability& reliability);

}  // namespace tessera::plan
