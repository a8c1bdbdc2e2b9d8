// How `tessera plan --serve` shows its answer: the best serving layouts of a model on one
// accelerator, or the best of each of several side by side with the cheapest per token named.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/model/model_config.h"
#include "tessera/plan/hardware.h"
#include "tessera/plan/serving.h"

namespace tessera::plan {

// `chips`: 0 plans each layout as one replica (or as many as the workload's target needs).
std::string serving_report(const model::ModelConfig& model, const HardwareCatalog& catalog,
                           const std::vector<std::string>& names, int64_t chips,
                           const ServingWorkload& workload, int64_t top, bool json);

}  // namespace tessera::plan
