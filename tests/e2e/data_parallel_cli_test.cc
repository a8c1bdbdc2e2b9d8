// Data parallelism under real mpirun: dp = 2 and 4 follow the dp = 1 loss curve for the same
// global batch and seed at every ZeRO stage, with and without gradient accumulation; each rank's
// memory follows the ZeRO formulas; sharded checkpoints resume on another mesh; bad meshes and
// dead ranks end the job with an error that names the problem instead of hanging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

class DataParallelCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  std::string args(const std::string& out, const std::string& extra) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kSmallModel +
           " --set train.steps=20 --set train.threads=1 --set dist.bucket_mb=0.02 " + extra;
  }
  TempDir dir{"tessera-dp-cli"};
};

TEST_F(DataParallelCli, EveryZeroStageFollowsTheSingleRankLossCurve) {
  for (const std::string accum : {"1", "2"}) {
    SCOPED_TRACE("grad_accum " + accum);
    const std::string extra = "--set train.grad_accum=" + accum;
    const CliResult one = run_cli(args("one-" + accum, extra));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const std::vector<double> reference = training_losses(dir / ("one-" + accum));
    ASSERT_EQ(reference.size(), 20u);
    for (int ranks : {2, 4}) {
      for (const std::string zero : {"0", "1", "2", "3"}) {
        const std::string dp = std::to_string(ranks);
        SCOPED_TRACE("dp " + dp + ", ZeRO " + zero);
        const std::string out = "dp" + dp + "-zero" + zero + "-" + accum;
        const CliResult r =
            run_mpi(ranks, args(out, extra + " --set mesh.dp=" + dp + " --set train.zero=" + zero));
        ASSERT_EQ(r.exit_code, 0) << r.output;
        EXPECT_NE(r.output.find("data parallel: " + dp + " ranks, ZeRO stage " + zero),
                  std::string::npos)
            << r.output;
        expect_same_losses(training_losses(dir / out), reference);
      }
    }
  }
}

// Model-state bytes per rank, as in the ZeRO paper: Psi parameters over N ranks with AdamW.
double zero_formula(const std::string& precision, int stage, double psi, double n) {
  if (precision == "bf16") {
    // bf16 parameters and gradients; f32 master weights and both moments are optimizer state.
    const double formulas[] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n,
                               16 * psi / n};
    return formulas[stage];
  }
  const double formulas[] = {16 * psi, 8 * psi + 8 * psi / n, 4 * psi + 12 * psi / n, 16 * psi / n};
  return formulas[stage];
}

TEST_F(DataParallelCli, EachRanksMemoryFollowsTheZeroFormulas) {
  const std::regex line(
      R"(memory rank (\d+): model state (\d+) B .* \((\d+) (\w+) parameters over (\d+) ranks\))");
  for (const std::string precision : {"f32", "bf16"}) {
    for (int stage = 0; stage <= 3; ++stage) {
      SCOPED_TRACE(precision + ", ZeRO " + std::to_string(stage));
      const std::string out = "memory-" + precision + std::to_string(stage);
      const CliResult r = run_mpi(
          4, args(out, "--set mesh.dp=4 --set train.steps=1 --set train.precision=" + precision +
                           " --set train.zero=" + std::to_string(stage)));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      int ranks_seen = 0;
      for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line);
           it != std::sregex_iterator(); ++it) {
        const std::smatch& m = *it;
        EXPECT_EQ(m[1].str(), std::to_string(ranks_seen));
        EXPECT_EQ(m[4].str(), precision);
        EXPECT_EQ(m[5].str(), "4");
        const double expected = zero_formula(precision, stage, std::stod(m[3]), 4);
        EXPECT_NEAR(std::stod(m[2]) / expected, 1.0, 0.05) << m.str();
        ++ranks_seen;
      }
      EXPECT_EQ(ranks_seen, 4) << r.output;
    }
  }
}

// ZeRO-3 on 4 ranks stops at step 10; ZeRO-1 on 2 ranks resumes from its shards and must continue
// exactly as the uninterrupted run; generation reads the sharded checkpoint too.
TEST_F(DataParallelCli, ShardedCheckpointsResumeOnAnotherMesh) {
  const std::string common = "--set checkpoint.every=10 ";
  const CliResult whole = run_mpi(4, args("whole", common + "--set mesh.dp=4 --set train.zero=3"));
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::vector<double> reference = training_losses(dir / "whole");
  ASSERT_EQ(reference.size(), 20u);
  const fs::path checkpoints = fs::path(dir / "whole") / "checkpoints";
  const nlohmann::json manifest =
      nlohmann::json::parse(std::ifstream(checkpoints / "step-000010" / "manifest.json"));
  EXPECT_EQ(manifest["world_size"], 4);
  EXPECT_EQ(manifest["metadata"]["placed"]["mesh"]["zero"], 3);
  EXPECT_EQ(manifest["metadata"]["placed"]["pieces"].size(), 4u);
  EXPECT_TRUE(fs::exists(checkpoints / "step-000010" / "rank-00003.bin"));

  const fs::path resumed_checkpoints = fs::path(dir / "resumed") / "checkpoints";
  fs::create_directories(resumed_checkpoints);
  fs::copy(checkpoints / "step-000010", resumed_checkpoints / "step-000010");
  const CliResult resumed =
      run_mpi(2, args("resumed", common + "--set mesh.dp=2 --set train.zero=1"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("resuming from"), std::string::npos) << resumed.output;
  expect_same_losses(training_losses(dir / "resumed"),
                     std::vector<double>(reference.begin() + 10, reference.end()));

  const CliResult sample = run_cli("generate --checkpoint " + (dir / "resumed") +
                                   " --prompt the --max-tokens 8 --temperature 0");
  EXPECT_EQ(sample.exit_code, 0) << sample.output;
}

TEST_F(DataParallelCli, MeshAndBatchMismatchesAreClearErrors) {
  CliResult r = run_mpi(2, args("bad-mesh", "--set mesh.dp=4"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("but the job has 2"), std::string::npos) << r.output;
  r = run_mpi(2, args("bad-batch", "--set mesh.dp=2 --set train.batch_size=3"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("train.batch_size (3) must be divisible by mesh.dp (2)"),
            std::string::npos)
      << r.output;
  expect_one_line_error(run_cli(args("one-rank", "--set mesh.dp=2")), "but the job has 1");
}

// SIGKILL one rank mid-run: the job must end promptly, the survivors saying that the launcher
// stopped them.
TEST_F(DataParallelCli, AKilledRankEndsTheJob) {
  const std::string out = dir / "killed";
  const std::string log = dir / "killed.log";
  const std::string command =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 " +
      std::string(TESSERA_BINARY) + " " +
      args("killed", "--set mesh.dp=2 --set train.steps=100000 --set dist.timeout_s=20") + " > " +
      log + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  const pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait until training runs, then kill the rank whose command line names this run.
  bool training = false;
  for (int i = 0; i < 600 && !training; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    training = !training_losses(out).empty();
  }
  ASSERT_TRUE(training) << "the job never started training";
  const std::vector<pid_t> ranks = training_processes(out);
  ASSERT_FALSE(ranks.empty()) << "no tessera process writes to " << out;
  const pid_t victim = ranks.back();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(job, &status, 0), job);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 60) << "the job took too long to end after a rank died";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  std::ifstream in(log);
  const std::string output{std::istreambuf_iterator<char>(in), {}};
  // The survivor learns of it from the launcher, which stops it.
  EXPECT_NE(output.find("rank 0 of 2: SIGTERM from the launcher"), std::string::npos) << output;
}

}  // namespace
}  // namespace tessera::testing
