#include "tessera/ckpt/state_reader.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "tessera/ckpt/checkpoint.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/core/json_reader.h"
#include "tessera/model/model_config_keys.h"
#include "tessera/model/parameter_store.h"

namespace tessera::ckpt {

namespace fs = std::filesystem;

namespace {

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

// One tensor of the checkpoint: a flat range [begin, end) of a source layout (the parameters of
// one slice, or of a single named tensor) that it holds, element begin first.
struct Source {
  std::string tensor;
  std::shared_ptr<const std::vector<model::ParamInfo>> params;
  int64_t begin = 0, end = 0;
  Shape shape;  // as the tensor is stored
};

nlohmann::json placement_json(const model::Placement& p) {
  nlohmann::json rows = nlohmann::json::array();
  for (const model::Placement::Rows& r : p.rows) rows.push_back({r.begin, r.count});
  return {{"rows", rows},
          {"col_begin", p.col_begin},
          {"cols", p.cols},
          {"global_cols", p.global_cols},
          {"padding_rows", p.padding_rows}};
}

std::vector<int64_t> shape_of(const JsonReader& r, const nlohmann::json& v,
                              const std::string& path) {
  check(v.is_array() && !v.empty() && v.size() <= size_t(Shape::kMaxRank),
        "{}: {} is not a shape of 1 to {} dimensions", r.source(), path, Shape::kMaxRank);
  std::vector<int64_t> dims;
  for (size_t i = 0; i < v.size(); ++i) {
    dims.push_back(r.int64(v[i], fmt::format("{}[{}]", path, i)));
    check(dims.back() >= 0, "{}: {}[{}] is negative", r.source(), path, i);
  }
  return dims;
}

Shape to_shape(const std::vector<int64_t>& d) {
  Shape s;
  switch (d.size()) {
    case 1:
      return {d[0]};
    case 2:
      return {d[0], d[1]};
    case 3:
      return {d[0], d[1], d[2]};
    default:
      return {d[0], d[1], d[2], d[3]};
  }
}

// The slices of a placed checkpoint, each its parameters with their placements.
std::map<std::string, std::shared_ptr<const std::vector<model::ParamInfo>>> parse_slices(
    const JsonReader& r, const nlohmann::json& placed) {
  std::map<std::string, std::shared_ptr<const std::vector<model::ParamInfo>>> slices;
  const nlohmann::json& all = r.field(placed, "slices", "placed.slices");
  check(all.is_object(), "{}: placed.slices is not an object", r.source());
  for (const auto& [key, list] : all.items()) {
    const std::string path = "placed.slices." + key;
    check(list.is_array(), "{}: {} is not a list", r.source(), path);
    auto params = std::make_shared<std::vector<model::ParamInfo>>();
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = fmt::format("{}[{}]", path, i);
      const nlohmann::json& e = list[i];
      check(e.is_object(), "{}: {} is not an object", r.source(), at);
      model::ParamInfo p;
      p.name = r.string(r.field(e, "name", at + ".name"), at + ".name");
      p.offset = r.int64(r.field(e, "offset", at + ".offset"), at + ".offset");
      p.shape = to_shape(shape_of(r, r.field(e, "shape", at + ".shape"), at + ".shape"));
      p.global_shape = to_shape(
          shape_of(r, r.field(e, "global_shape", at + ".global_shape"), at + ".global_shape"));
      const nlohmann::json& pl = r.field(e, "placement", at + ".placement");
      const nlohmann::json& rows = r.field(pl, "rows", at + ".placement.rows");
      check(rows.is_array(), "{}: {}.placement.rows is not a list", r.source(), at);
      for (size_t k = 0; k < rows.size(); ++k) {
        const std::string rp = fmt::format("{}.placement.rows[{}]", at, k);
        check(rows[k].is_array() && rows[k].size() == 2, "{}: {} is not [begin, count]", r.source(),
              rp);
        p.placement.rows.push_back({r.int64(rows[k][0], rp), r.int64(rows[k][1], rp)});
      }
      p.placement.col_begin = r.int64(r.field(pl, "col_begin", at + ".col_begin"), at);
      p.placement.cols = r.int64(r.field(pl, "cols", at + ".cols"), at);
      p.placement.global_cols = r.int64(r.field(pl, "global_cols", at + ".global_cols"), at);
      p.placement.padding_rows = r.int64(r.field(pl, "padding_rows", at + ".padding_rows"), at);
      check(p.placement.cols >= 1 && p.placement.local_rows() * p.placement.cols == p.shape.numel(),
            "{}: {}'s placement does not match its shape", r.source(), at);
      params->push_back(std::move(p));
    }
    slices[key] = std::move(params);
  }
  return slices;
}

std::vector<Source> placed_sources(const JsonReader& r, const nlohmann::json& placed,
                                   StatePart part) {
  const auto slices = parse_slices(r, placed);
  const nlohmann::json& pieces = r.field(placed, "pieces", "placed.pieces");
  check(pieces.is_array(), "{}: placed.pieces is not a list", r.source());
  std::vector<Source> sources;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string at = fmt::format("placed.pieces[{}]", i);
    const nlohmann::json& p = pieces[i];
    check(p.is_object(), "{}: {} is not an object", r.source(), at);
    const std::string name = r.string(r.field(p, "name", at + ".name"), at + ".name");
    const std::string slice = r.string(r.field(p, "slice", at + ".slice"), at + ".slice");
    const auto it = slices.find(slice);
    check(it != slices.end(), "{}: {} names the slice '{}', which is not in placed.slices",
          r.source(), at, slice);
    const int64_t b = r.int64(r.field(p, "begin", at + ".begin"), at + ".begin");
    const int64_t e = r.int64(r.field(p, "end", at + ".end"), at + ".end");
    check(0 <= b && b <= e, "{}: {} has the range [{}, {})", r.source(), at, b, e);
    sources.push_back({placed_tensor_name(name, part), it->second, b, e, Shape{e - b}});
  }
  return sources;
}

std::vector<Source> zero_sources(const JsonReader& r, const nlohmann::json& zero,
                                 const model::ParameterLayout& canonical, StatePart part) {
  const int64_t parameters = zero.value("parameters", int64_t{-1});
  check(parameters == canonical.total(),
        "{}: the checkpoint's shards hold {} flat parameters but this model has {}: it was "
        "written for another model configuration",
        r.source(), parameters, canonical.total());
  check(zero.contains("shards") && zero["shards"].is_array() && !zero["shards"].empty(),
        "{}: metadata zero.shards is not a list of [begin, end] pairs", r.source());
  const nlohmann::json& shards = zero["shards"];
  auto params = std::make_shared<std::vector<model::ParamInfo>>(canonical.entries());
  std::vector<Source> sources;
  int64_t expected = 0;
  for (size_t k = 0; k < shards.size(); ++k) {
    const nlohmann::json& s = shards[k];
    check(s.is_array() && s.size() == 2 && s[0].is_number_integer() && s[1].is_number_integer(),
          "{}: zero.shards[{}] is not a [begin, end] pair", r.source(), k);
    const int64_t b = s[0], e = s[1];
    check(b == expected && e >= b && e <= parameters,
          "{}: zero.shards[{}] = [{}, {}] does not continue the shards before it at {}", r.source(),
          k, b, e, expected);
    expected = e;
    sources.push_back({shard_tensor_name(part, int(k)), params, b, e, Shape{e - b}});
  }
  check(expected == parameters, "{}: the shards end at {} of {} parameters", r.source(), expected,
        parameters);
  return sources;
}

std::vector<Source> named_sources(const model::ParameterLayout& canonical, StatePart part) {
  std::vector<Source> sources;
  for (const model::ParamInfo& p : canonical.entries()) {
    model::ParamInfo whole = p;
    whole.offset = 0;
    auto params = std::make_shared<std::vector<model::ParamInfo>>(1, whole);
    sources.push_back({state_part_prefix(part) + p.name, params, 0, p.shape.numel(), p.shape});
  }
  return sources;
}

// Copies what `src` (elements [s.begin, s.end) of its layout, at data) holds of `target`'s
// parameter t into out (elements [begin, end) of the target layout), marking what it wrote.
void copy_overlap(const model::ParamInfo& t, const model::ParamInfo& sp, const Source& s,
                  const float* data, int64_t begin, int64_t end, float* out,
                  std::vector<uint8_t>& written) {
  const model::Placement& tp = t.placement;
  const model::Placement& pp = sp.placement;
  const int64_t tc0 = tp.col_begin, tc1 = tc0 + tp.cols, sc0 = pp.col_begin, sc1 = sc0 + pp.cols;
  const int64_t c0 = std::max(tc0, sc0), c1 = std::min(tc1, sc1);
  if (c0 >= c1) return;
  int64_t t_row = 0;
  for (const model::Placement::Rows& tr : tp.rows) {
    int64_t s_row = 0;
    for (const model::Placement::Rows& sr : pp.rows) {
      const int64_t g0 = std::max(tr.begin, sr.begin),
                    g1 = std::min(tr.begin + tr.count, sr.begin + sr.count);
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t ti = t_row + (g - tr.begin), si = s_row + (g - sr.begin);
        // The column run [c0, c1) of this row in both layouts, cut to both ranges.
        int64_t t_at = t.offset + ti * tp.cols + (c0 - tc0);
        int64_t s_at = sp.offset + si * pp.cols + (c0 - sc0);
        int64_t n = c1 - c0;
        const int64_t skip = std::max({int64_t(0), begin - t_at, s.begin - s_at});
        t_at += skip;
        s_at += skip;
        n -= skip;
        n = std::min({n, end - t_at, s.end - s_at});
        if (n <= 0) continue;
        std::memcpy(out + (t_at - begin), data + (s_at - s.begin), sizeof(float) * size_t(n));
        std::fill(written.begin() + (t_at - begin), written.begin() + (t_at - begin + n), 1);
      }
      s_row += sr.count;
    }
    t_row += tr.count;
  }
}

}  // namespace

std::string state_part_prefix(StatePart part) {
  return part == StatePart::kParams ? "" : std::string(part_name(part)) + ".";
}

std::string shard_tensor_name(StatePart part, int rank) {
  return fmt::format("shard.{}.{}", rank, part_name(part));
}

std::string placed_tensor_name(const std::string& piece, StatePart part) {
  return piece + "." + part_name(part);
}

std::string slice_name(const model::ModelLayout& slice) {
  const model::Sharding& s = slice.sharding;
  std::string name = fmt::format("tp{}.ep{}", s.tp_rank, s.ep_rank);
  if (slice.has_embedding && slice.has_head) return name;
  return fmt::format("{}.blocks{}-{}", name, slice.first_block,
                     slice.first_block + int64_t(slice.blocks.size()));
}

nlohmann::json placed_metadata(const std::vector<const model::ModelLayout*>& slices,
                               const std::vector<PlacedPiece>& pieces, const nlohmann::json& mesh) {
  nlohmann::json all = nlohmann::json::object();
  for (const model::ModelLayout* layout : slices) {
    nlohmann::json list = nlohmann::json::array();
    for (const model::ParamInfo& p : layout->params.entries()) {
      nlohmann::json shape = nlohmann::json::array(), global = nlohmann::json::array();
      for (int i = 0; i < p.shape.rank(); ++i) shape.push_back(p.shape[i]);
      for (int i = 0; i < p.global_shape.rank(); ++i) global.push_back(p.global_shape[i]);
      list.push_back({{"name", p.name},
                      {"offset", p.offset},
                      {"shape", shape},
                      {"global_shape", global},
                      {"placement", placement_json(p.placement)}});
    }
    all[slice_name(*layout)] = list;
  }
  nlohmann::json listed = nlohmann::json::array();
  for (const PlacedPiece& p : pieces) {
    listed.push_back({{"name", p.name}, {"slice", p.slice}, {"begin", p.begin}, {"end", p.end}});
  }
  return {{"mesh", mesh}, {"slices", all}, {"pieces", listed}};
}

fs::path checkpoint_step_dir(const fs::path& checkpoint) {
  std::error_code ec;
  if (fs::is_directory(checkpoint / "checkpoints", ec)) return resolve(checkpoint / "checkpoints");
  return resolve(checkpoint);
}

model::ModelConfig checkpoint_model_config(const fs::path& step_dir, const Manifest& manifest) {
  const std::string source = (step_dir / kManifestFile).string();
  check(manifest.metadata.contains("config") && manifest.metadata["config"].is_object() &&
            manifest.metadata["config"].contains("model"),
        "{}: manifest.json has no run config with a [model] section", source);
  Config config(model::model_config_schema());
  config.load_json({{"model", manifest.metadata["config"]["model"]}});
  model::ModelConfig m = model::model_config_from(config);
  // A LoRA run's adapters are part of the model its steps hold.
  const nlohmann::json& run = manifest.metadata["config"];
  if (run.contains("train") && run["train"].is_object()) {
    nlohmann::json lora = nlohmann::json::object();
    for (const auto& [key, value] : run["train"].items()) {
      if (key.starts_with("lora_")) lora[key] = value;
    }
    Config keys(config_schema(model::lora_settings()));
    keys.load_json({{"train", lora}});
    read_settings(model::lora_settings(), keys, m.lora);
    model::validate(m);
  }
  return m;
}

CheckpointParams read_checkpoint_params(const fs::path& step_dir, const Manifest& manifest) {
  CheckpointParams c{checkpoint_model_config(step_dir, manifest), {}};
  const model::ModelLayout layout = model::model_layout(c.config);
  const int64_t total = layout.params.total(), base_end = layout.adapters_begin;
  c.params.resize(size_t(total));
  if (!layout.has_adapters()) {
    read_state_range(step_dir, c.config, layout.params, StatePart::kParams, 0, total,
                     c.params.data());
    return c;
  }
  // The adapters, on the base model the manifest names: a committed step, or the seed's.
  if (const std::optional<fs::path> base = lora_base(step_dir, manifest.metadata)) {
    read_state_range(*base, c.config, layout.params, StatePart::kParams, 0, base_end,
                     c.params.data());
  } else {
    const nlohmann::json& train = manifest.metadata["config"]["train"];
    check(train.contains("seed") && train["seed"].is_number_integer(),
          "{}: manifest.json's run config has no train.seed to rebuild the adapters' base from",
          step_dir.string());
    model::initial_parameters(layout, train["seed"].get<uint64_t>(), 0, base_end, c.params.data());
  }
  read_state_range(step_dir, c.config, layout.params, StatePart::kParams, base_end, total,
                   c.params.data() + base_end);
  return c;
}

std::string checkpoint_tokenizer(const fs::path& step_dir, const nlohmann::json& metadata) {
  const nlohmann::json t =
      metadata.is_object() ? metadata.value("tokenizer", nlohmann::json("byte")) : "byte";
  if (t.is_string()) return t.get<std::string>();
  check(t.is_object() && t.contains("dir") && t["dir"].is_string(),
        "{}: manifest.json names its tokenizer as {}, not \"byte\" or {{\"kind\", \"dir\"}}",
        step_dir.string(), t.dump());
  const fs::path beside_run = step_dir.parent_path().parent_path() / "tokenizer";
  std::error_code ec;
  if (fs::is_directory(beside_run, ec)) return beside_run.string();
  return t["dir"].get<std::string>();
}

void read_state_range(const fs::path& step_dir, const model::ModelConfig& config,
                      const model::ParameterLayout& target, StatePart part, int64_t begin,
                      int64_t end, float* out) {
  const Manifest manifest = read_manifest(step_dir);
  const std::string source = (step_dir / kManifestFile).string();
  const JsonReader r(source);
  const nlohmann::json& meta = manifest.metadata;
  const model::ModelLayout canonical = model::canonical_model_layout(config);
  std::vector<Source> sources;
  if (meta.is_object() && meta.contains("placed")) {
    sources = placed_sources(r, meta["placed"], part);
  } else if (meta.is_object() && meta.contains("zero")) {
    check(meta["zero"].is_object(), "{}: metadata zero is not an object", r.source());
    sources = zero_sources(r, meta["zero"], canonical.params, part);
  } else {
    sources = named_sources(canonical.params, part);
  }
  std::fill(out, out + (end - begin), 0.0f);
  std::vector<uint8_t> written(size_t(end - begin), 0);
  // The target parameters the range touches, by name.
  std::map<std::string, const model::ParamInfo*> wanted;
  for (const model::ParamInfo& p : target.entries()) {
    if (p.offset < end && p.offset + p.shape.numel() > begin) wanted[p.name] = &p;
  }
  // Each source that holds part of a wanted parameter is read once, whole, and checksummed.
  for (const Source& s : sources) {
    std::vector<std::pair<const model::ParamInfo*, const model::ParamInfo*>> overlaps;
    for (const model::ParamInfo& sp : *s.params) {
      if (sp.offset >= s.end || sp.offset + sp.shape.numel() <= s.begin) continue;
      const auto it = wanted.find(sp.name);
      if (it != wanted.end()) overlaps.emplace_back(it->second, &sp);
    }
    if (overlaps.empty()) continue;
    std::vector<float> data(size_t(s.end - s.begin));
    load(step_dir, {{s.tensor, Tensor{data.data(), s.shape, DType::f32}}});
    for (const auto& [t, sp] : overlaps) {
      check(t->global_shape == sp->global_shape,
            "{}: {} has the shape {} in the checkpoint but {} in this model", r.source(), t->name,
            sp->global_shape.str(), t->global_shape.str());
      copy_overlap(*t, *sp, s, data.data(), begin, end, out, written);
    }
  }
  // Every element of the range that is a parameter's value (not alignment or vocabulary padding)
  // must have come from the checkpoint.
  for (const auto& [name, p] : wanted) {
    const int64_t lo = std::max(begin, p->offset), hi = std::min(end, p->offset + p->shape.numel());
    for (int64_t i = lo; i < hi; ++i) {
      if (written[i - begin] == 0 && p->placement.global_index(i - p->offset) >= 0) {
        fail("{}: the checkpoint holds no {} of {} (element {})", r.source(), part_name(part), name,
             i - p->offset);
      }
    }
  }
}

}  // namespace tessera::ckpt
