#include <gtest/gtest.h>

#include <cmath>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {


class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  CliResult train(const std::string& out, const std::string& extra) {
    return run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kSmallModel +
                   " " + extra);
  }
  TempDir dir{"tessera-train-cli"};
};

TEST_F(TrainCli, TrainsThenGeneratesFromTheCheckpoint) {
  CliResult r = train("run", "--set train.steps=20 --set train.lr=3e-3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("unigram entropy"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tok/s"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ETA"), std::string::npos) << r.output;
  std::vector<double> losses = training_losses(dir / "run");
  ASSERT_EQ(losses.size(), 20u);
  EXPECT_LT(losses.back(), losses.front() - 1.0);
  EXPECT_TRUE(std::filesystem::exists(dir / "run/config.toml"));
  EXPECT_TRUE(std::filesystem::exists(dir / "run/checkpoints/step-000020/COMMIT"));

  CliResult g = run_cli("generate --checkpoint " + (dir / "run") +
                        " --prompt 'In the' --max-tokens 20 --seed 3");
  ASSERT_EQ(g.exit_code, 0) << g.output;
  EXPECT_EQ(g.output.rfind("In the", 0), 0u) << g.output;
  EXPECT_GE(g.output.size(), 26u);
  EXPECT_EQ(g.output, run_cli("generate --checkpoint " + (dir / "run") +
                              " --prompt 'In the' --max-tokens 20 --seed 3")
                          .output);
}

TEST_F(TrainCli, SameSeedAndThreadsGiveBitIdenticalLosses) {
  ASSERT_EQ(train("a", "--set train.steps=6 --set train.threads=2").exit_code, 0);
  ASSERT_EQ(train("b", "--set train.steps=6 --set train.threads=2").exit_code, 0);
  ASSERT_EQ(train("c", "--set train.steps=6 --set train.threads=1").exit_code, 0);
  std::vector<double> a = training_losses(dir / "a"), b = training_losses(dir / "b"),
                      c = training_losses(dir / "c");
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  ASSERT_EQ(c.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(c[i] / a[i], 1.0, 1e-5) << "step " << i + 1;
}

TEST_F(TrainCli, ResumingFromACheckpointContinuesExactly) {
  ASSERT_EQ(train("whole", "--set train.steps=6").exit_code, 0);
  ASSERT_EQ(train("split", "--set train.steps=6 --set checkpoint.every=3").exit_code, 0);
  // Pretend the run died after step 3: drop the final checkpoint and the later metrics.
  std::filesystem::remove_all(dir / "split/checkpoints/step-000006");
  std::filesystem::remove(dir / "split/checkpoints/latest");
  std::vector<double> before = training_losses(dir / "split");
  std::filesystem::remove(dir / "split/metrics.jsonl");
  CliResult r = train("split", "--set train.steps=6 --set checkpoint.every=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resuming"), std::string::npos) << r.output;
  std::vector<double> whole = training_losses(dir / "whole"),
                      resumed = training_losses(dir / "split");
  ASSERT_EQ(resumed.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(resumed[i], whole[3 + i]) << "step " << i + 4;
  EXPECT_EQ(before, whole);
}

}  // namespace
}  // namespace tessera::testing
