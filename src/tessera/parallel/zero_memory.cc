#include "tessera/parallel/zero_memory.h"

#include "tessera/core/error.h"

namespace tessera::parallel {

ZeroBytes zero_model_state(int stage, model::Precision precision, double params, int64_t ranks) {
  check(stage >= 0 && stage <= 3, "ZeRO stage must be 0, 1, 2 or 3, got {}", stage);
  check(ranks >= 1, "ZeRO needs at least one rank, got {}", ranks);
  ZeroBytes per_param;
  switch (precision) {
    case model::Precision::kF32:
      per_param = {4, 4, 8};
      break;
    case model::Precision::kBf16:
      per_param = {2, 2, 12};
      break;
    case model::Precision::kF16:
      per_param = {2, 4, 12};
      break;
  }
  const double shard = params / double(ranks);
  return {per_param.params * (stage >= 3 ? shard : params),
          per_param.grads * (stage >= 2 ? shard : params),
          per_param.optimizer * (stage >= 1 ? shard : params)};
}

}  // namespace tessera::parallel
