// Every run setting is one row (train/run_config.cc): its struct default is its schema default,
// the reader and the writer invert each other, docs/training.md has one row for it with that
// default, and a Hugging Face folder's config sets it or its row says why not.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "tessera/train/hf_run.h"
#include "tessera/train/run_config.h"

namespace tessera::train {
namespace {

// The value of `row`'s key in a config holding `run`.
ConfigValue value_of(const Setting<RunConfig>& row, const RunConfig& run) {
  const std::optional<ConfigValue> value = row.get(run);
  EXPECT_TRUE(value.has_value()) << row.name;
  return value.value_or(ConfigValue{});
}

TEST(Settings, StructDefaultsAreTheSchemaDefaults) {
  const Config defaults(run_config_schema());
  const RunConfig read = run_config_from(defaults);
  for (const Setting<RunConfig>& row : run_settings()) {
    EXPECT_EQ(value_of(row, RunConfig{}), defaults.value(row.name)) << row.name;
    EXPECT_EQ(value_of(row, read), defaults.value(row.name)) << row.name;
  }
}

// Writing a read config back gives the same config, for a file that sets many keys.
TEST(Settings, TheWriterInvertsTheReader) {
  Config file(run_config_schema());
  file.load_file(TESSERA_SOURCE_DIR "/configs/gpt2-124m.toml");
  for (const char* assignment :
       {"mesh.pp_layers=3,3,3,3", "mesh.pp=4", "train.grad_accum=4", "obs.trace_steps=3:5",
        "fault.nan_gradient_steps=2,7-8", "train.precision=bf16", "mesh.pp_schedule=gpipe"}) {
    file.set_override(assignment);
  }
  Config written(run_config_schema());
  write_settings(run_settings(), run_config_from(file), written);
  EXPECT_EQ(written.to_json(), file.to_json());
}

// The `| key | default | meaning |` rows of docs/training.md's "## Keys" table: key -> default.
std::multimap<std::string, std::string> documented_keys() {
  std::ifstream page(TESSERA_SOURCE_DIR "/docs/training.md");
  std::multimap<std::string, std::string> rows;
  bool in_table = false;
  for (std::string line; std::getline(page, line);) {
    if (line == "## Keys") in_table = true;
    if (!in_table || !line.starts_with("| ") || line.starts_with("| key |")) continue;
    if (line.starts_with("| ---")) continue;
    const size_t second = line.find(" | ", 2);
    const size_t third = line.find(" | ", second + 3);
    if (second == std::string::npos || third == std::string::npos) {
      ADD_FAILURE() << "malformed row: " << line;
      continue;
    }
    rows.emplace(line.substr(2, second - 2), line.substr(second + 3, third - second - 3));
  }
  return rows;
}

// A default as the docs write it, read as `key`'s type: numbers by value (2e-3 is 0.002), text
// in backticks, `""` for none.
ConfigValue documented_value(const ConfigKey& key, std::string text) {
  if (text.size() >= 2 && text.front() == '`' && text.back() == '`') {
    text = text.substr(1, text.size() - 2);
  }
  switch (key.type) {
    case ConfigType::kInt:
      return int64_t(std::strtoll(text.c_str(), nullptr, 10));
    case ConfigType::kFloat:
      return std::strtod(text.c_str(), nullptr);
    case ConfigType::kBool:
      return text == "true";
    case ConfigType::kString:
    case ConfigType::kPath:
      return text == "\"\"" ? std::string() : text;
  }
  return {};
}

TEST(Settings, TheDocsHaveOneRowPerKeyWithItsDefault) {
  const std::multimap<std::string, std::string> rows = documented_keys();
  std::set<std::string> keys;
  for (const ConfigKey& key : run_config_schema()) {
    keys.insert(key.name);
    ASSERT_EQ(rows.count(key.name), 1u) << key.name << " needs one row in docs/training.md";
    EXPECT_EQ(documented_value(key, rows.find(key.name)->second), key.default_value)
        << key.name << " is documented with default " << rows.find(key.name)->second;
  }
  for (const auto& [name, default_text] : rows) {
    EXPECT_TRUE(keys.contains(name)) << "docs/training.md documents no key " << name;
  }
}

// Models that between them hold every [model] key away from its default: RoPE scaling's keys
// belong to one type each, so each type's keys move in a model of that type.
std::vector<model::ModelConfig> unusual_models() {
  model::ModelConfig m;
  m.arch = model::Architecture::kLlama;
  m.vocab_size = 300;
  m.n_layer = 3;
  m.n_head = 8;
  m.d_model = 64;
  m.max_seq = 128;
  m.n_kv_head = 2;
  m.ffn_hidden = 96;
  m.rope_theta = 5e5;
  m.rope_scaling = {kernels::RopeScalingType::kLlama3, 8, 2, 6, 64};
  m.head_dim_override = 32;
  m.parallel_block = true;
  m.norm_eps = 1e-6;
  m.tie_embeddings = false;
  m.qk_norm = true;
  m.moe = {
      .n_experts = 4, .top_k = 1, .n_shared = 1, .capacity_factor = 1.25, .aux_loss_coef = 0.02};
  model::ModelConfig yarn = m;
  yarn.rope_scaling = {.type = kernels::RopeScalingType::kYarn,
                       .factor = 4,
                       .original_context = 32,
                       .beta_fast = 16,
                       .beta_slow = 2,
                       .attention_factor = 1.2};
  return {m, yarn};
}

TEST(Settings, AHuggingFaceFolderSetsEveryKeyOrItsRowSaysWhyNot) {
  std::vector<RunConfig> expected, imported;
  for (const model::ModelConfig& model : unusual_models()) {
    imported.push_back(run_config_from(hf_run_config(model, "byte")));
    expected.emplace_back().model = model;
  }
  for (const Setting<RunConfig>& row : run_settings()) {
    if (!row.not_from_hf.empty()) {
      EXPECT_FALSE(row.name.starts_with("model.")) << row.name << ": a model key comes from HF";
      continue;
    }
    bool moved = false;
    for (size_t i = 0; i < expected.size(); ++i) {
      moved = moved || value_of(row, expected[i]) != value_of(row, RunConfig{});
      EXPECT_EQ(value_of(row, imported[i]), value_of(row, expected[i])) << row.name;
    }
    EXPECT_TRUE(moved) << row.name
                       << ": give it a value other than its default in unusual_models()";
  }
}

}  // namespace
}  // namespace tessera::train
