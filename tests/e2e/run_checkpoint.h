// A run folder's newest checkpoint read back in-process: its model config and parameters, for
// tests that compare the engine with another implementation on the same weights.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/core/config.h"
#include "tessera/model/model_layout.h"
#include "tessera/train/run_config.h"

namespace tessera::testing {

struct Checkpoint {
  model::ModelConfig config;
  std::vector<float> params;  // the flat buffer of model_layout(config)
};

inline Checkpoint load_checkpoint(const std::string& run) {
  const std::filesystem::path step = ckpt::resolve(std::filesystem::path(run) / "checkpoints");
  const ckpt::Manifest manifest = ckpt::read_manifest(step);
  Config config(train::run_config_schema());
  config.load_json(manifest.metadata.at("config"));
  Checkpoint c;
  c.config = train::run_config_from(config).model;
  const model::ModelLayout layout = model::model_layout(c.config);
  c.params.assign(size_t(layout.params.total()), 0.0f);
  ckpt::load(step, model::named_views(layout.params, c.params.data()));
  return c;
}

}  // namespace tessera::testing
