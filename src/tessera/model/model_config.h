// The model layer: GPT-2 with explicit forward and backward passes over one arena. It uses the
// kernels and never knows about training loops, data or checkpoints on disk.
#pragma once

#include <cstdint>

namespace tessera::model {

struct ModelConfig {
  int64_t vocab_size = 256;
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t d_model = 256;
  int64_t max_seq = 256;  // learned position table size: the longest context
};

// Throws tessera::Error naming the offending model.* key.
void validate(const ModelConfig& config);

}  // namespace tessera::model
