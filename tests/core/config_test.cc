#include "tessera/core/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tessera/core/error.h"
#include "tests/expect_error.h"

namespace tessera {
namespace {

using testing::expect_error;

std::vector<ConfigKey> test_schema() {
  return {
      {"model.n_layer", ConfigType::kInt, int64_t{4}, true, "blocks"},
      {"model.name", ConfigType::kString, std::string("tiny"), false, "label"},
      {"train.steps", ConfigType::kInt, int64_t{600}, false, "steps"},
      {"train.learning_rate", ConfigType::kFloat, 1e-3, false, "peak lr"},
      {"train.fused", ConfigType::kBool, false, false, "fuse kernels"},
      {"data.path", ConfigType::kPath, std::string(), false, "corpus"},
  };
}

TEST(Config, DefaultsAreParsedByType) {
  Config config(test_schema());
  EXPECT_EQ(config.get_int("model.n_layer"), 4);
  EXPECT_EQ(config.get_string("model.name"), "tiny");
  EXPECT_EQ(config.get_int("train.steps"), 600);
  EXPECT_DOUBLE_EQ(config.get_float("train.learning_rate"), 1e-3);
  EXPECT_FALSE(config.get_bool("train.fused"));
  EXPECT_EQ(config.get_string("data.path"), "");
  EXPECT_EQ(config.schema().size(), 6u);
}

TEST(Config, GettersRejectUnknownKeysAndWrongTypes) {
  Config config(test_schema());
  expect_error([&] { config.get_int("train.nope"); }, {"train.nope"});
  expect_error([&] { config.get_float("train.steps"); }, {"train.steps"});
  expect_error([&] { config.get_string("train.fused"); }, {"train.fused"});
}

TEST(Config, BadSchemaIsRejected) {
  expect_error([] { Config({{"flat", ConfigType::kInt, int64_t{1}, false, ""}}); }, {"flat"});
  expect_error([] { Config({{"a.b.c", ConfigType::kInt, int64_t{1}, false, ""}}); }, {"a.b.c"});
  expect_error([] { Config({{"a.b", ConfigType::kInt, std::string("x"), false, ""}}); }, {"a.b"});
  expect_error(
      [] {
        Config({{"a.b", ConfigType::kInt, int64_t{1}, false, ""},
                {"a.b", ConfigType::kInt, int64_t{2}, false, ""}});
      },
      {"a.b"});
}

TEST(Config, LoadStringSetsValuesAndKeepsOthersAtDefault) {
  Config config(test_schema());
  config.load_string(R"(
[model]
n_layer = 12
[train]
learning_rate = 3   # an integer is fine for a float key
fused = true
)",
                     "config.toml");
  EXPECT_EQ(config.get_int("model.n_layer"), 12);
  EXPECT_DOUBLE_EQ(config.get_float("train.learning_rate"), 3.0);
  EXPECT_TRUE(config.get_bool("train.fused"));
  EXPECT_EQ(config.get_int("train.steps"), 600);
  EXPECT_EQ(config.get_string("model.name"), "tiny");
}

TEST(Config, LoadFileReadsTomlAndNamesMissingFile) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "tessera_config_test.toml";
  {
    std::ofstream out(path);
    out << "[model]\nn_layer = 7\n[data]\npath = \"corpus.txt\"\n";
  }
  Config config(test_schema());
  config.load_file(path.string());
  EXPECT_EQ(config.get_int("model.n_layer"), 7);
  EXPECT_EQ(config.get_string("data.path"), "corpus.txt");
  std::filesystem::remove(path);
  expect_error([&] { config.load_file(path.string()); }, {path.string()});
}

TEST(Config, PrecedenceIsDefaultsThenFileThenOverrides) {
  Config config(test_schema());
  config.load_string("[model]\nn_layer = 8\n[train]\nsteps = 100\n", "config.toml");
  config.set_override("train.steps=200");
  EXPECT_EQ(config.get_int("model.n_layer"), 8);                    // file
  EXPECT_EQ(config.get_int("train.steps"), 200);                    // --set beats the file
  EXPECT_DOUBLE_EQ(config.get_float("train.learning_rate"), 1e-3);  // default
}

TEST(Config, OverridesParseEachType) {
  Config config(test_schema());
  config.set_override("train.learning_rate=3e-4");
  EXPECT_DOUBLE_EQ(config.get_float("train.learning_rate"), 3e-4);
  config.set_override("train.learning_rate=0.001");
  EXPECT_DOUBLE_EQ(config.get_float("train.learning_rate"), 0.001);
  config.set_override("train.learning_rate=2");
  EXPECT_DOUBLE_EQ(config.get_float("train.learning_rate"), 2.0);
  config.set_override("train.steps=-3");
  EXPECT_EQ(config.get_int("train.steps"), -3);
  config.set_override("train.fused=true");
  EXPECT_TRUE(config.get_bool("train.fused"));
  config.set_override("train.fused=false");
  EXPECT_FALSE(config.get_bool("train.fused"));
  config.set_override("data.path=a=b.txt");
  EXPECT_EQ(config.get_string("data.path"), "a=b.txt");
  config.set_override("data.path=");
  EXPECT_EQ(config.get_string("data.path"), "");
}

TEST(Config, MalformedOverridesAreRejected) {
  Config config(test_schema());
  expect_error([&] { config.set_override("foo"); }, {"--set expects section.key=value", "'foo'"});
  expect_error([&] { config.set_override("steps=3"); }, {"--set expects", "'steps=3'"});
  expect_error([&] { config.set_override("=3"); }, {"--set expects"});
  expect_error([&] { config.set_override("train.foo=1"); }, {"--set: unknown key 'train.foo'"});
  expect_error([&] { config.set_override("train.stesp=1"); },
               {"unknown key 'train.stesp'", "did you mean 'train.steps'"});
  expect_error([&] { config.set_override("train.steps=1.5"); }, {"--set", "train.steps", "1.5"});
  expect_error([&] { config.set_override("train.steps=12abc"); }, {"train.steps", "12abc"});
  expect_error([&] { config.set_override("train.steps="); }, {"train.steps"});
  expect_error([&] { config.set_override("train.learning_rate=fast"); },
               {"train.learning_rate", "fast"});
  expect_error([&] { config.set_override("train.learning_rate=nan"); }, {"train.learning_rate"});
  expect_error([&] { config.set_override("train.fused=yes"); }, {"train.fused", "yes"});
  EXPECT_EQ(config.get_int("train.steps"), 600);  // failed overrides change nothing
}

TEST(Config, SyntaxErrorNamesFileLineAndColumn) {
  Config config(test_schema());
  expect_error([&] { config.load_string("[model]\nn_layer = = 3\n", "config.toml"); },
               {"config.toml:2:"});
}

TEST(Config, UnknownSectionsAndKeysAreRejected) {
  Config config(test_schema());
  expect_error([&] { config.load_string("[trian]\nsteps = 1\n", "config.toml"); },
               {"config.toml", "unknown section 'trian'", "did you mean 'train'"});
  expect_error(
      [&] { config.load_string("[model]\nn_layer = 1\n[train]\nlerning_rate = 1.0\n", "c.toml"); },
      {"c.toml: unknown key 'train.lerning_rate'", "did you mean 'train.learning_rate'"});
  expect_error([&] { config.load_string("[model]\nn_layer = 1\n[train]\nzzz = 1\n", "c.toml"); },
               {"unknown key 'train.zzz'"});
  expect_error([&] { config.load_string("steps = 1\n", "c.toml"); }, {"c.toml", "steps"});
  expect_error([&] { config.load_string("model = 1\n", "c.toml"); }, {"c.toml", "model"});
}

TEST(Config, NestedTablesAreRejected) {
  Config config(test_schema());
  expect_error(
      [&] { config.load_string("[model]\nn_layer = 1\n[train.extra]\nx = 1\n", "c.toml"); },
      {"c.toml", "train.extra"});
}

TEST(Config, WrongTypesAreRejected) {
  Config config(test_schema());
  expect_error(
      [&] {
        config.load_string("[model]\nn_layer = 1\n[train]\nsteps = \"abc\"\n", "config.toml");
      },
      {"config.toml: train.steps must be an integer, got string \"abc\""});
  expect_error([&] { config.load_string("[model]\nn_layer = 1.5\n", "c.toml"); },
               {"model.n_layer", "float"});
  expect_error([&] { config.load_string("[model]\nn_layer = 1\n[train]\nfused = 1\n", "c.toml"); },
               {"train.fused", "boolean"});
  expect_error([&] { config.load_string("[model]\nn_layer = 1\nname = [1]\n", "c.toml"); },
               {"model.name", "array"});
  expect_error(
      [&] { config.load_string("[model]\nn_layer = 1\n[train]\nlearning_rate = nan\n", "c.toml"); },
      {"train.learning_rate"});
}

TEST(Config, RequiredKeysAreOnlyRequiredOfFiles) {
  Config config(test_schema());
  EXPECT_EQ(config.get_int("model.n_layer"), 4);  // no file: the default serves
  expect_error([&] { config.load_string("[train]\nsteps = 5\n", "config.toml"); },
               {"config.toml: missing required key 'model.n_layer'"});
  EXPECT_EQ(config.get_int("train.steps"), 600);  // a failed load changes nothing
}

// A saved config names the same file from any folder: a path that exists is kept absolute,
// whether it came from a file, a --set or JSON; anything else is kept as given.
TEST(Config, PathsThatExistAreKeptAbsolute) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / "tessera-config-paths";
  std::filesystem::create_directories(folder / "corpus");
  struct InFolder {
    std::filesystem::path before = std::filesystem::current_path();
    explicit InFolder(const std::filesystem::path& folder) {
      std::filesystem::current_path(folder);
    }
    ~InFolder() { std::filesystem::current_path(before); }
  };
  auto in_folder = std::make_unique<InFolder>(folder);
  Config config(test_schema());
  config.set_override("data.path=corpus/../corpus");
  const std::string absolute = (folder / "corpus").string();
  EXPECT_EQ(config.get_string("data.path"), absolute);
  config.load_string("[model]\nn_layer = 1\n[data]\npath = \"corpus\"\n", "c.toml");
  EXPECT_EQ(config.get_string("data.path"), absolute);
  config.set_override("data.path=byte");
  EXPECT_EQ(config.get_string("data.path"), "byte");
  config.load_json({{"model", {{"n_layer", 1}}}, {"data", {{"path", "corpus"}}}});
  EXPECT_EQ(config.get_string("data.path"), absolute);
  in_folder.reset();
  std::filesystem::remove_all(folder);
  Config elsewhere(test_schema());
  elsewhere.load_string(config.to_toml(), "saved.toml");
  EXPECT_EQ(elsewhere.get_string("data.path"), absolute);
}

TEST(Config, TomlRoundTripPreservesEveryValue) {
  Config config(test_schema());
  config.load_string("[model]\nn_layer = 3\n", "config.toml");
  config.set_override("train.learning_rate=1");  // must come back as a float, not an int
  config.set_override("train.fused=true");
  config.set_override("data.path=dir with \"quotes\"\\and\ttab");
  config.set_override("model.name=x");
  const std::string toml = config.to_toml();
  EXPECT_NE(toml.find("[train]"), std::string::npos) << toml;
  Config reloaded(test_schema());
  reloaded.load_string(toml, "resolved.toml");
  EXPECT_EQ(reloaded.to_json(), config.to_json()) << toml;
  EXPECT_EQ(reloaded.get_string("data.path"), "dir with \"quotes\"\\and\ttab");
  EXPECT_TRUE(reloaded.to_json()["train"]["learning_rate"].is_number_float());
}

TEST(Config, JsonRoundTripAndValidation) {
  Config config(test_schema());
  config.set_override("train.steps=42");
  config.set_override("train.learning_rate=2.5e-4");
  const nlohmann::json j = config.to_json();
  EXPECT_EQ(j["train"]["steps"], 42);
  EXPECT_EQ(j["model"]["name"], "tiny");
  Config reloaded(test_schema());
  reloaded.load_json(j);
  EXPECT_EQ(reloaded.to_json(), j);
  EXPECT_DOUBLE_EQ(reloaded.get_float("train.learning_rate"), 2.5e-4);

  nlohmann::json bad = j;
  bad["train"]["stepz"] = 1;
  expect_error([&] { reloaded.load_json(bad); }, {"unknown key 'train.stepz'"});
  bad = j;
  bad["train"]["steps"] = "many";
  expect_error([&] { reloaded.load_json(bad); }, {"train.steps", "integer"});
  bad = j;
  bad["model"].erase("n_layer");
  expect_error([&] { reloaded.load_json(bad); }, {"missing required key 'model.n_layer'"});
  expect_error([&] { reloaded.load_json(nlohmann::json::array()); }, {"object"});
  EXPECT_EQ(reloaded.get_int("train.steps"), 42);
}

}  // namespace
}  // namespace tessera
