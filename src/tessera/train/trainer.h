// The training application: builds data, model and optimizer from a resolved config and runs
// the loop. It never parses command lines; the CLI hands it a Config.
#pragma once

#include <filesystem>

#include "tessera/core/config.h"

namespace tessera::train {

struct TrainSummary {
  int64_t steps = 0;
  double first_val_loss = 0;  // before the first update (or at the resumed step)
  double final_val_loss = 0;
  double final_val_bits_per_byte = 0;  // final_val_loss per byte of held-out text, in bits
  std::filesystem::path checkpoint;
  // Stopped early by SIGTERM, with a checkpoint of `steps` committed.
  bool preempted = false;
};

// Trains into out_dir: config.toml (resolved), metrics.jsonl, checkpoints/. A run directory
// that already holds a committed checkpoint is resumed from it.
TrainSummary train(const Config& config, const std::filesystem::path& out_dir);

}  // namespace tessera::train
