// How a training run's state is named in a checkpoint, and reading it back whatever data-parallel
// layout wrote it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "tessera/ckpt/manifest.h"
#include "tessera/model/model_config.h"
#include "tessera/model/parameters.h"

namespace tessera::train {

enum class StatePart { kParams, kAdamM, kAdamV };

// Unsharded checkpoints name every tensor: "<param>" for the parameters, "adamw.m.<param>" and
// "adamw.v.<param>" for the moments.
std::string state_part_prefix(StatePart part);
// A ZeRO shard is one flat f32 tensor per part and rank: "shard.<rank>.params",
// "shard.<rank>.adamw.m", "shard.<rank>.adamw.v"; the manifest's metadata "zero" holds each
// rank's [begin, end) of the flat layout under "shards".
std::string shard_tensor_name(StatePart part, int rank);

// The step directory a user names as a run directory (its latest committed step), its
// checkpoints/ folder, or one step directory.
std::filesystem::path checkpoint_step_dir(const std::filesystem::path& checkpoint);
// The model a committed step holds, from the run config its manifest records.
model::ModelConfig checkpoint_model_config(const std::filesystem::path& step_dir,
                                           const ckpt::Manifest& manifest);

// Fills out[0, end - begin) with elements [begin, end) of the flat layout from a committed step
// written unsharded or by any ZeRO stage and rank count. Every tensor read is checksummed.
void read_state_range(const std::filesystem::path& step_dir, const model::ParameterLayout& layout,
                      StatePart part, int64_t begin, int64_t end, float* out);

}  // namespace tessera::train
