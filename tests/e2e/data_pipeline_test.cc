#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/e2e/cli_runner.h"

namespace fs = std::filesystem;

namespace tessera::testing {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

class DataPipeline : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  CliResult train(const std::string& data, const std::string& out, const std::string& extra) {
    return run_cli("train --data " + data + " --out " + (dir / out) + kSmallModel + " " + extra);
  }
  TempDir dir{"tessera-data-pipeline"};
};

TEST_F(DataPipeline, PreparedDatasetTrainsLikeTheSameTextPreparedOnTheFly) {
  CliResult p = run_cli("prepare --out " + (dir / "ds") + " " + (dir / "corpus.txt"));
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("training tokens"), std::string::npos) << p.output;
  const nlohmann::json manifest = read_json(dir / "ds/dataset.json");
  EXPECT_EQ(manifest["tokenizer"]["kind"], "byte");
  EXPECT_EQ(manifest["vocab_size"], 256);

  CliResult a = train(dir / "ds", "a", "--set train.steps=5");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("bits/byte"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("data wait"), std::string::npos) << a.output;
  CliResult b = train(dir / "corpus.txt", "b", "--set train.steps=5");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_TRUE(fs::exists(dir / "b/dataset/dataset.json"));
  EXPECT_EQ(training_losses(dir / "a"), training_losses(dir / "b"));

  const nlohmann::json step = read_json(dir / "a/checkpoints/step-000005/manifest.json");
  EXPECT_EQ(step["metadata"]["tokenizer"], "byte");
  EXPECT_EQ(step["metadata"]["samples_consumed"], 5 * 4);
}

TEST_F(DataPipeline, ResumeWithAccumulationAndPrefetchContinuesTheSameBatches) {
  ASSERT_EQ(run_cli("prepare --out " + (dir / "ds") + " " + (dir / "corpus.txt")).exit_code, 0);
  const std::string args =
      "--set train.steps=6 --set train.grad_accum=2 --set data.prefetch=3 "
      "--set checkpoint.keep_last=3";
  ASSERT_EQ(train(dir / "ds", "whole", args).exit_code, 0);
  ASSERT_EQ(train(dir / "ds", "split", args + " --set checkpoint.every=2").exit_code, 0);
  fs::remove_all(dir / "split/checkpoints/step-000006");
  fs::remove_all(dir / "split/checkpoints/step-000004");
  fs::remove(dir / "split/checkpoints/latest");
  fs::remove(dir / "split/metrics.jsonl");
  const nlohmann::json step = read_json(dir / "split/checkpoints/step-000002/manifest.json");
  EXPECT_EQ(step["metadata"]["samples_consumed"], 2 * 2 * 4);
  CliResult r = train(dir / "ds", "split", args + " --set checkpoint.every=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("16 samples consumed"), std::string::npos) << r.output;
  const std::vector<double> whole = training_losses(dir / "whole"),
                            resumed = training_losses(dir / "split");
  ASSERT_EQ(resumed.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed[i], whole[2 + i]) << "step " << i + 3;
}

TEST_F(DataPipeline, TrainsOnTextWithATokenizerFolderAndGeneratesWithIt) {
  CliResult t = run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                        (dir / "corpus.txt"));
  ASSERT_EQ(t.exit_code, 0) << t.output;
  expect_one_line_error(train(dir / "corpus.txt", "small", "--tokenizer " + (dir / "tok")),
                        "model.vocab_size (256)");
  CliResult r = train(dir / "corpus.txt", "run",
                      "--tokenizer " + (dir / "tok") +
                          " --set model.vocab_size=320 --set train.steps=20 --set train.lr=3e-3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tessera-bpe tokenizer"), std::string::npos) << r.output;
  const nlohmann::json ds = read_json(dir / "run/dataset/dataset.json");
  EXPECT_LE(ds["vocab_size"].get<int64_t>(), 300);
  EXPECT_LT(ds["train"]["tokens"].get<int64_t>(), ds["train"]["bytes"].get<int64_t>());
  EXPECT_TRUE(fs::is_directory(dir / "run/tokenizer"));
  const nlohmann::json step = read_json(dir / "run/checkpoints/step-000020/manifest.json");
  EXPECT_EQ(step["metadata"]["tokenizer"]["kind"], "tessera-bpe");

  // The run folder carries its tokenizer: generation works with the original folder gone.
  fs::remove_all(dir / "tok");
  CliResult g = run_cli("generate --checkpoint " + (dir / "run") +
                        " --prompt 'In the' --max-tokens 10 --seed 3");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output.rfind("In the", 0), 0u) << g.output;
  EXPECT_GT(g.output.size(), 12u) << g.output;
}

TEST_F(DataPipeline, BadDataIsAOneLineError) {
  expect_one_line_error(run_cli("prepare " + (dir / "corpus.txt")), "--out");
  expect_one_line_error(run_cli("prepare --out " + (dir / "x")), "FILE");
  expect_one_line_error(run_cli("prepare --out " + (dir / "x") + " " + (dir / "nope.txt")),
                        "nope.txt: no such file");
  expect_one_line_error(run_cli("prepare --tokenizer " + (dir / "notok") + " --out " + (dir / "x") +
                                " " + (dir / "corpus.txt")),
                        "notok");
  ASSERT_EQ(run_cli("prepare --out " + (dir / "ds") + " " + (dir / "corpus.txt")).exit_code, 0);
  // A tokenizer given beside a prepared dataset must be the dataset's own.
  ASSERT_EQ(run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                    (dir / "corpus.txt"))
                .exit_code,
            0);
  expect_one_line_error(train(dir / "ds", "r", "--set data.tokenizer=" + (dir / "tok")),
                        "tokens and data.tokenizer = " + (dir / "tok") + "'s");
  const std::string shard = dir / "ds/train-000000.bin";
  fs::resize_file(shard, fs::file_size(shard) - 1);
  expect_one_line_error(train(dir / "ds", "r", ""), shard + ": truncated");
}

}  // namespace
}  // namespace tessera::testing
