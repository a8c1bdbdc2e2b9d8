#include "tessera/model/model_config.h"

#include "tessera/core/error.h"

namespace tessera::model {

void validate(const ModelConfig& config) {
  check(config.vocab_size >= 1, "model.vocab_size must be >= 1, got {}", config.vocab_size);
  check(config.n_layer >= 1, "model.n_layer must be >= 1, got {}", config.n_layer);
  check(config.n_head >= 1, "model.n_head must be >= 1, got {}", config.n_head);
  check(config.d_model >= 1, "model.d_model must be >= 1, got {}", config.d_model);
  check(config.max_seq >= 1, "model.max_seq must be >= 1, got {}", config.max_seq);
  check(config.d_model % config.n_head == 0,
        "model.d_model ({}) must be divisible by model.n_head ({})", config.d_model, config.n_head);
}

}  // namespace tessera::model
