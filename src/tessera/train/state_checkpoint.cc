#include "tessera/train/state_checkpoint.h"

#include <algorithm>
#include <vector>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/core/error.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

namespace {

// One tensor of the checkpoint and the flat range [begin, end) it holds.
struct Piece {
  std::string name;
  Shape shape;
  int64_t begin, end;
};

const char* part_name(StatePart part) {
  switch (part) {
    case StatePart::kParams:
      return "params";
    case StatePart::kAdamM:
      return "adamw.m";
    case StatePart::kAdamV:
      return "adamw.v";
  }
  fail("unknown state part");
}

std::vector<Piece> shard_pieces(const nlohmann::json& zero, const std::string& source,
                                const model::ParameterLayout& layout, StatePart part) {
  const auto parameters = zero.value("parameters", int64_t{-1});
  check(parameters == layout.total(),
        "{}: the checkpoint's shards hold {} flat parameters but this model has {}: it was "
        "written for another model configuration",
        source, parameters, layout.total());
  check(zero.contains("shards") && zero["shards"].is_array() && !zero["shards"].empty(),
        "{}: metadata zero.shards is not a list of [begin, end] pairs", source);
  const nlohmann::json& shards = zero["shards"];
  std::vector<Piece> pieces;
  int64_t expected = 0;
  for (size_t r = 0; r < shards.size(); ++r) {
    const nlohmann::json& s = shards[r];
    check(s.is_array() && s.size() == 2 && s[0].is_number_integer() && s[1].is_number_integer(),
          "{}: zero.shards[{}] is not a [begin, end] pair", source, r);
    const int64_t b = s[0], e = s[1];
    check(b == expected && e >= b && e <= parameters,
          "{}: zero.shards[{}] = [{}, {}] does not continue the shards before it at {}", source, r,
          b, e, expected);
    expected = e;
    pieces.push_back({shard_tensor_name(part, int(r)), Shape{e - b}, b, e});
  }
  check(expected == parameters, "{}: the shards end at {} of {} parameters", source, expected,
        parameters);
  return pieces;
}

std::vector<Piece> named_pieces(const model::ParameterLayout& layout, StatePart part) {
  std::vector<Piece> pieces;
  for (const model::ParamInfo& p : layout.entries()) {
    pieces.push_back(
        {state_part_prefix(part) + p.name, p.shape, p.offset, p.offset + p.shape.numel()});
  }
  return pieces;
}

}  // namespace

std::string state_part_prefix(StatePart part) {
  return part == StatePart::kParams ? "" : std::string(part_name(part)) + ".";
}

std::string shard_tensor_name(StatePart part, int rank) {
  return fmt::format("shard.{}.{}", rank, part_name(part));
}

std::filesystem::path checkpoint_step_dir(const std::filesystem::path& checkpoint) {
  std::error_code ec;
  if (std::filesystem::is_directory(checkpoint / "checkpoints", ec)) {
    return ckpt::resolve(checkpoint / "checkpoints");
  }
  return ckpt::resolve(checkpoint);
}

model::ModelConfig checkpoint_model_config(const std::filesystem::path& step_dir,
                                           const ckpt::Manifest& manifest) {
  check(manifest.metadata.contains("config"), "{}: manifest.json has no run config",
        step_dir.string());
  Config config(run_config_schema());
  config.load_json(manifest.metadata["config"]);
  return run_config_from(config).model;
}

void read_state_range(const std::filesystem::path& step_dir, const model::ParameterLayout& layout,
                      StatePart part, int64_t begin, int64_t end, float* out) {
  const ckpt::Manifest manifest = ckpt::read_manifest(step_dir);
  const std::string source = (step_dir / "manifest.json").string();
  const nlohmann::json& meta = manifest.metadata;
  const bool sharded = meta.is_object() && meta.contains("zero");
  check(!sharded || meta["zero"].is_object(), "{}: metadata zero is not an object", source);
  const std::vector<Piece> pieces =
      sharded ? shard_pieces(meta["zero"], source, layout, part) : named_pieces(layout, part);
  std::fill(out, out + (end - begin), 0.0f);
  // Pieces inside the range load in place; a piece that straddles an end (at most one at each)
  // loads into scratch, and one load call reads and checks them all.
  std::vector<NamedTensor> views;
  std::vector<const Piece*> straddling;
  std::vector<std::vector<float>> scratch;
  for (const Piece& p : pieces) {
    if (p.end <= begin || p.begin >= end) continue;
    float* dst;
    if (p.begin < begin || p.end > end) {
      straddling.push_back(&p);
      dst = scratch.emplace_back(size_t(p.end - p.begin)).data();
    } else {
      dst = out + (p.begin - begin);
    }
    views.push_back({p.name, Tensor{dst, p.shape, DType::f32}});
  }
  ckpt::load(step_dir, views);
  for (size_t i = 0; i < straddling.size(); ++i) {
    const Piece& p = *straddling[i];
    const int64_t lo = std::max(begin, p.begin), hi = std::min(end, p.end);
    std::copy(scratch[i].begin() + (lo - p.begin), scratch[i].begin() + (hi - p.begin),
              out + (lo - begin));
  }
}

}  // namespace tessera::train
