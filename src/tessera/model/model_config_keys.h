#pragma once

#include <vector>

#include "tessera/core/config.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// The [model] keys of a run's config, with their defaults (the built-in tiny byte-level model),
// and the validated ModelConfig they give; run configs and checkpoint manifests both read them.
std::vector<ConfigKey> model_config_schema();
// Throws tessera::Error naming the model.* key at fault.
ModelConfig model_config_from(const Config& config);

}  // namespace tessera::model
