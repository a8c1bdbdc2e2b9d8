#pragma once

#include <vector>

#include "tessera/core/config.h"
#include "tessera/core/settings.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// The [model] keys of a run's config, one row each over ModelConfig, whose defaults (the built-in
// tiny byte-level model) are the struct's. Run configs and checkpoint manifests read them, and a
// model read from elsewhere (a Hugging Face folder) is written back through them.
const Settings<ModelConfig>& model_settings();
std::vector<ConfigKey> model_config_schema();
// The train.lora_* keys over a run's LoraConfig: a run's settings, which its checkpoints record
// beside the model's.
const Settings<LoraConfig>& lora_settings();
// Throws tessera::Error naming the model.* key at fault.
ModelConfig model_config_from(const Config& config);

}  // namespace tessera::model
