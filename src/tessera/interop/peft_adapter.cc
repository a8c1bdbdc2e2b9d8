#include "tessera/interop/peft_adapter.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"
#include "tessera/core/json_file.h"
#include "tessera/interop/safetensors.h"
#include "tessera/model/model_layout.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPeftPrefix = "base_model.model.";

// One PEFT adapter: a module's lora_A and lora_B, where they sit in Tessera's layout.
struct PeftModule {
  std::string name;      // the module's path: "model.layers.0.self_attn.q_proj"
  std::string target;    // as target_modules names it: "self_attn.q_proj"
  int64_t a = 0, b = 0;  // offsets of its A block [rank, in] and its rows of B [rows, rank]
  int64_t in = 0, rows = 0;
};

// Every module the adapters of `layout` cover, block by block in parameter order.
std::vector<PeftModule> peft_modules(const model::ModelLayout& layout) {
  const model::BlockSpec& spec = layout.spec.block;
  const int64_t r = spec.lora_rank;
  std::vector<PeftModule> modules;
  for (size_t l = 0; l < layout.adapters.size(); ++l) {
    const std::string prefix = fmt::format(fmt::runtime(layout.spec.hf_block_prefix), l);
    for (const model::Part& b : spec.adapters) {
      if (b.lora != model::LoraMatrix::kB) continue;
      const model::AdapterOffsets& o = layout.adapters[l][b.id];
      const int64_t in = spec.part(b.id).in;
      const std::vector<int64_t> rows = model::lora_piece_rows(b);
      const int64_t pieces = int64_t(rows.size());
      for (int64_t e = 0; e < b.stack; ++e) {  // each expert of a stack: one module per piece
        const int64_t a = o.a + e * pieces * r * in, up = o.b + e * b.out * r;
        int64_t row = 0;
        for (int64_t j = 0; j < pieces; ++j) {
          const std::string& path = b.external[size_t(j)].hf;
          const std::string module = fmt::format(fmt::runtime(path), fmt::arg("e", e));
          // Experts' modules are targeted by their last name (w1), as PEFT matches them.
          const size_t expert = path.find("{e}.");
          const std::string target = expert == std::string::npos ? path : path.substr(expert + 4);
          modules.push_back({prefix + module, target, a + j * r * in, up + row * r, in, rows[j]});
          row += rows[j];
        }
      }
    }
  }
  return modules;
}

std::string tensor_name(const PeftModule& m, char matrix) {
  return fmt::format("{}{}.lora_{}.weight", kPeftPrefix, m.name, matrix);
}

// The config's lora_dropout, 0 when it has none.
double lora_dropout(const json& c, const std::string& source) {
  if (!c.contains("lora_dropout") || c["lora_dropout"].is_null()) return 0;
  const json& dropout = c["lora_dropout"];
  check(dropout.is_number() && dropout.get<double>() >= 0 && dropout.get<double>() < 1,
        "{}: lora_dropout must be a number in [0, 1), got {}", source, dropout.dump());
  return dropout.get<double>();
}

}  // namespace

void export_peft(const model::ModelConfig& config, std::span<const float> params,
                 const fs::path& dir, const std::string& base_model) {
  check(config.lora.enabled(), "export_peft: the model has no LoRA adapters");
  const model::ModelLayout layout = model::model_layout(config);
  check(int64_t(params.size()) == layout.params.total(),
        "export_peft: {} parameters for a layout of {}", params.size(), layout.params.total());
  std::error_code ec;
  fs::create_directories(dir, ec);
  check(!ec, "{}: cannot create the adapter folder: {}", dir.string(), ec.message());
  const int64_t r = config.lora.rank;
  std::vector<SafetensorsTensor> tensors;
  std::set<std::string> targets;
  for (const PeftModule& m : peft_modules(layout)) {
    targets.insert(m.target);
    tensors.push_back({tensor_name(m, 'A'), {r, m.in}, [&params, m, r](std::span<float> out) {
                         std::copy_n(params.data() + m.a, r * m.in, out.data());
                       }});
    tensors.push_back({tensor_name(m, 'B'), {m.rows, r}, [&params, m, r](std::span<float> out) {
                         std::copy_n(params.data() + m.b, m.rows * r, out.data());
                       }});
  }
  write_safetensors(dir / kPeftWeightsFile, tensors, DType::f32, {{"format", "pt"}});
  // The keys of PEFT's LoraConfig that say how the update is computed, with their meaning here.
  const json adapter_config = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model},
      {"r", r},
      {"lora_alpha", config.lora.alpha},
      {"lora_dropout", config.lora.dropout},
      {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
      {"bias", "none"},
      {"fan_in_fan_out", layout.spec.block.part(model::PartId::kQkv).hf_transposed},
      {"use_rslora", false},
      {"use_dora", false},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", json::object()},
      {"alpha_pattern", json::object()},
      {"revision", nullptr}};
  std::ofstream out(dir / kPeftConfigFile, std::ios::binary | std::ios::trunc);
  out << adapter_config.dump(2) << "\n";
  check(out.good(), "{}: cannot write {}", dir.string(), kPeftConfigFile);
}

bool PeftSettings::adapts(const std::string& module) const {
  for (const std::string& t : targets) {
    if (module == t || (module.size() > t.size() && module.ends_with("." + t))) return true;
    if (t.size() > module.size() && t.ends_with("." + module)) return true;
  }
  return false;
}

PeftSettings peft_settings(const json& c, const model::ModelConfig& base,
                           const std::string& source) {
  check(c.is_object(), "{}: not a JSON object", source);
  auto key = [&](const char* name) -> const json& {
    check(c.contains(name), "{}: no \"{}\"", source, name);
    return c[name];
  };
  check(key("peft_type") == "LORA", "{}: peft_type {} is not \"LORA\"", source,
        key("peft_type").dump());
  check(key("r").is_number_integer() && key("r").get<int64_t>() >= 1 &&
            key("r").get<int64_t>() <= 65536,
        "{}: r must be an integer in [1, 65536], got {}", source, key("r").dump());
  check(key("lora_alpha").is_number() && key("lora_alpha").get<double>() > 0,
        "{}: lora_alpha must be a positive number, got {}", source, key("lora_alpha").dump());
  const auto is_off = [&](const char* name) {
    return !c.contains(name) || c[name].is_null() || c[name] == false ||
           (c[name].is_object() && c[name].empty()) || c[name] == "none";
  };
  for (const char* unsupported : {"use_dora", "use_rslora", "rank_pattern", "alpha_pattern", "bias",
                                  "modules_to_save", "layers_to_transform"}) {
    check(is_off(unsupported),
          "{}: \"{}\" = {} changes the update Tessera computes; it is not "
          "supported",
          source, unsupported, c.value(unsupported, json()).dump());
  }
  const json& listed = key("target_modules");
  check(listed.is_array(),
        "{}: target_modules must be a list of module names (a regular expression is not "
        "supported), got {}",
        source, listed.dump());
  PeftSettings settings{base, {}};
  std::set<std::string>& targets = settings.targets;
  for (const json& t : listed) {
    check(t.is_string() && t.get<std::string>().size() <= 256,
          "{}: target_modules holds {}, not a module name", source, t.dump());
    targets.insert(t.get<std::string>());
  }

  model::ModelConfig& config = settings.config;
  config.lora.rank = key("r").get<int64_t>();
  config.lora.alpha = key("lora_alpha").get<double>();
  config.lora.dropout = lora_dropout(c, source);
  // The parts whose modules PEFT adapts.
  const model::ModelSpec spec = model::model_spec(base);
  std::string parts;
  const std::pair<model::PartId, const char*> kPartTargets[] = {
      {model::PartId::kQkv, "qkv"},
      {model::PartId::kAttentionOut, "attn_out"},
      {model::PartId::kMlpIn, "mlp_in"},
      {model::PartId::kMlpOut, "mlp_out"},
      {model::PartId::kExpertsIn, "experts_in"},
      {model::PartId::kExpertsOut, "experts_out"}};
  std::set<std::string> covered;
  for (const auto& [id, name] : kPartTargets) {
    if (!spec.block.has(id)) continue;
    for (const model::ExternalSlice& slice : spec.block.part(id).external) {
      if (!settings.adapts(slice.hf)) continue;
      if (covered.insert(name).second) parts += (parts.empty() ? "" : ",") + std::string(name);
    }
  }
  check(!parts.empty(), "{}: target_modules {} names no module of the model Tessera can adapt",
        source, listed.dump());
  config.lora.targets = parts;
  model::validate(config);
  return settings;
}

PeftImport import_peft(const fs::path& dir, const model::ModelConfig& base) {
  const fs::path config_path = dir / kPeftConfigFile;
  const PeftSettings settings = peft_settings(
      read_json_file(config_path, "the PEFT adapter config"), base, config_path.string());
  PeftImport imported{settings.config, {}};
  const model::ModelConfig& config = imported.config;
  const model::ModelLayout layout = model::model_layout(config);
  const int64_t r = config.lora.rank, begin = layout.adapters_begin;
  imported.adapters.assign(size_t(layout.params.total() - begin), 0.0f);
  const SafetensorsFile file(dir / kPeftWeightsFile);
  std::set<std::string> used;
  for (const PeftModule& m : peft_modules(layout)) {
    if (!settings.adapts(m.target)) continue;  // fused beside an adapted module: stays zero
    for (const char matrix : {'A', 'B'}) {
      const std::string name = tensor_name(m, matrix);
      const SafetensorsEntry* e = file.find(name);
      check(e != nullptr, "{}: no tensor '{}'", file.source(), name);
      const std::vector<int64_t> shape =
          matrix == 'A' ? std::vector<int64_t>{r, m.in} : std::vector<int64_t>{m.rows, r};
      check(e->shape == shape, "{}: tensor '{}' has shape {}, but r = {} and the module imply {}",
            file.source(), name, json(e->shape).dump(), r, json(shape).dump());
      const int64_t at = (matrix == 'A' ? m.a : m.b) - begin;
      file.read_f32(*e, std::span<float>(imported.adapters.data() + at, size_t(e->numel())));
      used.insert(name);
    }
  }
  for (const SafetensorsEntry& e : file.header().tensors) {
    check(used.count(e.name) == 1,
          "{}: tensor '{}' is no LoRA matrix of a module this model adapts", file.source(), e.name);
  }
  return imported;
}

}  // namespace tessera::interop
