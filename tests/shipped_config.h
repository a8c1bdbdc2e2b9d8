// The model of a config shipped in configs/, read as `tessera train` reads it.
#pragma once

#include <string>

#include "tessera/core/config.h"
#include "tessera/model/model_config.h"
#include "tessera/train/run_config.h"

namespace tessera::testing {

inline model::ModelConfig shipped_model(const std::string& name) {
  Config config(train::run_config_schema());
  config.load_file(std::string(TESSERA_SOURCE_DIR) + "/configs/" + name);
  return train::run_config_from(config).model;
}

}  // namespace tessera::testing
