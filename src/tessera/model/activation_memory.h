#pragma once

#include <cstdint>

#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// Bytes one block keeps between its forward and its backward over `tokens` tokens (batch x
// sequence). The formula is documented in docs/memory.md; the model allocates exactly this, and
// the planner uses the same function.
int64_t saved_activation_bytes_per_layer(const ModelConfig& config, int64_t tokens, Precision p,
                                         Recompute r);

}  // namespace tessera::model
