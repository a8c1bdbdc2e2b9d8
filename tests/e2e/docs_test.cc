// The docs match the binary: every example marked runnable runs, and the manifest example has the
// keys of a real checkpoint's manifest.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// A fenced block of the docs that the line before it marks as runnable.
struct Example {
  std::string where;  // "docs/planner.md:9"
  std::string script;
};

constexpr const char* kRunnable = "<!-- runnable -->";

std::vector<Example> runnable_examples() {
  std::vector<fs::path> pages = {fs::path(TESSERA_SOURCE_DIR) / "README.md"};
  for (const auto& entry : fs::directory_iterator(fs::path(TESSERA_SOURCE_DIR) / "docs")) {
    if (entry.path().extension() == ".md") pages.push_back(entry.path());
  }
  std::vector<Example> examples;
  for (const fs::path& page : pages) {
    std::ifstream in(page);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    for (size_t i = 0; i + 1 < lines.size(); ++i) {
      if (lines[i] != kRunnable) continue;
      EXPECT_EQ(lines[i + 1].rfind("```", 0), 0u)
          << page << ":" << i + 1 << ": " << kRunnable << " must come just before a ``` block";
      Example example{fs::relative(page, TESSERA_SOURCE_DIR).string() + ":" + std::to_string(i + 2),
                      ""};
      for (size_t j = i + 2; j < lines.size() && lines[j].rfind("```", 0) != 0; ++j) {
        example.script += lines[j] + "\n";
      }
      examples.push_back(example);
    }
  }
  return examples;
}

// Each example runs as a user would paste it: in a fresh folder that has the repository's
// configs/, with the built binary first on the PATH, stopping at the first failing command.
TEST(Docs, RunnableExamplesRun) {
  const std::vector<Example> examples = runnable_examples();
  EXPECT_GE(examples.size(), 5u) << "the docs lost their runnable examples";
  const std::string bin = fs::path(TESSERA_BINARY).parent_path().string();
  for (const Example& example : examples) {
    const TempDir dir("tessera-docs-example");
    fs::create_directory_symlink(fs::path(TESSERA_SOURCE_DIR) / "configs", dir.path() / "configs");
    write_file(dir / "example.sh", example.script);
    const CliResult r = run_command("cd " + dir.path().string() + " && PATH=" + bin +
                                    ":$PATH bash -euo pipefail example.sh");
    EXPECT_EQ(r.exit_code, 0) << example.where << ":\n" << example.script << r.output;
  }
}

std::set<std::string> keys(const nlohmann::json& object) {
  std::set<std::string> out;
  for (const auto& [key, value] : object.items()) out.insert(key);
  return out;
}

TEST(Docs, ManifestExampleHasTheKeysOfARealCheckpoint) {
  const std::string page = read_all(std::string(TESSERA_SOURCE_DIR) + "/docs/checkpoints.md");
  const size_t section = page.find("## manifest.json");
  ASSERT_NE(section, std::string::npos);
  const size_t begin = page.find("```json\n", section) + 8;
  const nlohmann::json example = nlohmann::json::parse(page.substr(begin, page.find("```", begin) - begin));

  const TempDir dir("tessera-docs-manifest");
  write_file(dir / "corpus.txt", small_corpus());
  ASSERT_EQ(run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / "run") +
                    kSmallModel + " --set train.steps=1")
                .exit_code,
            0);
  const nlohmann::json real =
      nlohmann::json::parse(read_all(dir / "run/checkpoints/step-000001/manifest.json"));
  EXPECT_EQ(keys(example), keys(real));
  EXPECT_EQ(keys(example["metadata"]), keys(real["metadata"]));
  EXPECT_EQ(keys(example["tensors"][0]), keys(real["tensors"][0]));
  EXPECT_EQ(example["version"], real["version"]);
  EXPECT_EQ(example["format"], real["format"]);
}

}  // namespace
}  // namespace tessera::testing
