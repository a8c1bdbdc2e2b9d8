// Data parallelism under real mpirun: dp = 2 and 4 follow the dp = 1 loss curve for the same
// global batch and seed, with and without gradient accumulation; bad meshes and dead ranks end
// the job with an error that names the problem instead of hanging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// The newest tessera process whose command line names `out`: one rank of that job.
pid_t rank_process(const std::string& out) {
  const fs::path binary = fs::canonical(TESSERA_BINARY);
  pid_t newest = -1;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    if (fs::read_symlink(entry.path() / "exe", ec) != binary || ec) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    const std::string cmdline{std::istreambuf_iterator<char>(in), {}};
    if (cmdline.find(out) != std::string::npos) newest = std::max(newest, pid_t(std::stol(name)));
  }
  return newest;
}

class DataParallelCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  std::string args(const std::string& out, const std::string& extra) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kSmallModel +
           " --set train.steps=20 --set train.threads=1 --set dist.bucket_mb=0.02 " + extra;
  }
  TempDir dir{"tessera-dp-cli"};
};

TEST_F(DataParallelCli, RanksFollowTheSingleRankLossCurve) {
  for (const std::string accum : {"1", "2"}) {
    SCOPED_TRACE("grad_accum " + accum);
    const std::string extra = "--set train.grad_accum=" + accum;
    const CliResult one = run_cli(args("one-" + accum, extra));
    ASSERT_EQ(one.exit_code, 0) << one.output;
    const std::vector<double> reference = training_losses(dir / ("one-" + accum));
    ASSERT_EQ(reference.size(), 20u);
    for (int ranks : {2, 4}) {
      SCOPED_TRACE("dp " + std::to_string(ranks));
      const std::string out = "dp" + std::to_string(ranks) + "-" + accum;
      const CliResult r =
          run_mpi(ranks, args(out, extra + " --set mesh.dp=" + std::to_string(ranks)));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("data parallel: " + std::to_string(ranks) + " ranks"),
                std::string::npos)
          << r.output;
      const std::vector<double> losses = training_losses(dir / out);
      ASSERT_EQ(losses.size(), reference.size());
      for (size_t i = 0; i < losses.size(); ++i) {
        EXPECT_NEAR(losses[i] / reference[i], 1.0, 1e-5) << "step " << i + 1;
      }
    }
  }
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

// SIGKILL one rank mid-run: the job must end promptly with errors from the survivors.
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
  const pid_t victim = rank_process(out);
  ASSERT_GT(victim, 0) << "no tessera process writes to " << out;
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(job, &status, 0), job);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 60) << "the job took too long to end after a rank died";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  std::ifstream in(log);
  const std::string output{std::istreambuf_iterator<char>(in), {}};
  EXPECT_NE(output.find("error: rank "), std::string::npos) << output;
}

}  // namespace
}  // namespace tessera::testing
