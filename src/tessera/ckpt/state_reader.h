// How a training run's state is named in a checkpoint, and reading any part of it back into any
// rank's layout, whatever layout wrote it: one rank unsharded, ZeRO shards of the canonical flat
// layout, or placed pieces written by every rank of a (dp, tp, ep, zero) mesh.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/ckpt/manifest.h"
#include "tessera/model/model_config.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parameters.h"

namespace tessera::ckpt {

enum class StatePart { kParams, kAdamM, kAdamV };
inline constexpr StatePart kStateParts[] = {StatePart::kParams, StatePart::kAdamM,
                                            StatePart::kAdamV};

// Unsharded checkpoints name every tensor: "<param>" for the parameters, "adamw.m.<param>" and
// "adamw.v.<param>" for the moments.
std::string state_part_prefix(StatePart part);
// ZeRO shards of the canonical flat layout (the format of earlier releases) are one flat f32
// tensor per part and rank: "shard.<rank>.params", "shard.<rank>.adamw.m", "shard.<rank>.adamw.v";
// the manifest's metadata "zero" holds each rank's [begin, end) under "shards".
std::string shard_tensor_name(StatePart part, int rank);

// A placed checkpoint: each writing rank saves flat ranges of its own layout (a slice of the
// model: its tensor- and expert-parallel coordinates and its pipeline stage's blocks), one tensor
// "<piece>.<part>" per part. The manifest's metadata "placed" lists every slice's parameters (each
// with its local offset and shape, global shape and placement in the whole tensor) and every piece
// (its slice and range), so the checkpoint loads on any layout without knowing the one that wrote
// it.
struct PlacedPiece {
  std::string name;  // tensors are "<name>.params", "<name>.adamw.m", "<name>.adamw.v"
  std::string slice;
  int64_t begin = 0, end = 0;
};
std::string placed_tensor_name(const std::string& piece, StatePart part);
// "tp<t>.ep<e>" for a slice of every block, "tp<t>.ep<e>.blocks<b>-<e>" for a pipeline stage's.
std::string slice_name(const model::ModelLayout& slice);
nlohmann::json placed_metadata(const std::vector<const model::ModelLayout*>& slices,
                               const std::vector<PlacedPiece>& pieces, const nlohmann::json& mesh);

// The step directory a user names as a run directory (its latest committed step), its
// checkpoints/ folder or one step directory.
std::filesystem::path checkpoint_step_dir(const std::filesystem::path& checkpoint);
// The model a committed step holds, from the run config its manifest records.
model::ModelConfig checkpoint_model_config(const std::filesystem::path& step_dir,
                                           const Manifest& manifest);

// A committed step's model and its whole parameters, in the flat layout of model_layout(config).
// A LoRA run's step holds its adapters alone: the model is its base (the step its manifest names as
// "lora_base", or the run seed's initial model) with the adapters.
struct CheckpointParams {
  model::ModelConfig config;
  std::vector<float> params;
};
CheckpointParams read_checkpoint_params(const std::filesystem::path& step_dir,
                                        const Manifest& manifest);

// The tokenizer a committed step was trained with, as load_tokenizer takes it: "byte", or its
// copy in the run folder (found next to the checkpoints first, so a moved run folder still
// works, then where the run wrote it).
std::string checkpoint_tokenizer(const std::filesystem::path& step_dir,
                                 const nlohmann::json& metadata);

// Fills out[0, end - begin) with the elements [begin, end) of `target`'s flat layout (a layout of
// `config` for any sharding) from a committed step in any of the formats above. Every tensor read
// is checksummed; an element the checkpoint does not hold is an error naming its parameter.
void read_state_range(const std::filesystem::path& step_dir, const model::ModelConfig& config,
                      const model::ParameterLayout& target, StatePart part, int64_t begin,
                      int64_t end, float* out);

}  // namespace tessera::ckpt
