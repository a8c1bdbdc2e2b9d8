// How a multi-rank job ends when one rank fails. Each test launches its own small mpirun job, so
// these run only in a process that was not itself started by a launcher.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

#include "tessera/dist/launch.h"

namespace tessera::dist {
namespace {

struct JobResult {
  int exit_code;
  std::string output;  // stdout and stderr of every rank and of mpirun
  double seconds;
};

JobResult run_job(int ranks, const std::string& program_and_args) {
  const std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " +
                              std::string(TESSERA_MPIEXEC) + " --oversubscribe -np " +
                              std::to_string(ranks) + " " + program_and_args + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output, elapsed.count()};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class JobFailure : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world().size() > 1) GTEST_SKIP() << "starts its own mpirun jobs";
  }
};

// Runs a dist_probe timeout mode, in which rank 0 (2 s timeout) waits in `operation` for rank 1
// (60 s), and checks that rank 0 ends the job within seconds, naming the operation.
void expect_timeout_ends_the_job(const std::string& mode, const std::string& operation) {
  const JobResult job = run_job(2, std::string(TESSERA_DIST_PROBE) + " " + mode);
  EXPECT_NE(job.exit_code, 0) << job.output;
  EXPECT_TRUE(contains(job.output, "error: rank 0 of 2: " + operation +
                                       " did not complete within 2 s; another rank has probably "
                                       "failed or stopped\n"))
      << job.output;
  EXPECT_TRUE(contains(job.output,
                       "error: rank 1 of 2: stopped by the launcher because another rank failed"))
      << job.output;
  EXPECT_GE(job.seconds, 2.0);
  EXPECT_LT(job.seconds, 30.0) << "the other rank's 60 s timeout should not matter";
}

TEST_F(JobFailure, ABlockingRecvPastTheTimeoutEndsTheJobNamingRankAndOperation) {
  expect_timeout_ends_the_job("timeout", "recv of 4 f32 elements from rank 1 (tag 7)");
}

TEST_F(JobFailure, AWaitPastTheTimeoutEndsTheJobNamingRankAndOperation) {
  expect_timeout_ends_the_job("wait-timeout", "recv of 4 f32 elements from rank 1 (tag 7)");
}

TEST_F(JobFailure, ABlockingCollectivePastTheTimeoutEndsTheJob) {
  expect_timeout_ends_the_job("barrier-timeout", "barrier");
}

TEST_F(JobFailure, ARankThatDiesTakesTheOthersDownWithAMessage) {
  const JobResult job = run_job(3, std::string(TESSERA_DIST_PROBE) + " exit");
  EXPECT_NE(job.exit_code, 0) << job.output;
  for (int rank : {0, 2}) {
    EXPECT_TRUE(contains(job.output, "error: rank " + std::to_string(rank) +
                                         " of 3: stopped by the launcher because another rank "
                                         "failed"))
        << job.output;
  }
  EXPECT_LT(job.seconds, 30.0);
}

TEST_F(JobFailure, CliErrorsNameTheRankAndEndTheJob) {
  const JobResult job = run_job(2, std::string(TESSERA_BINARY) + " train --set nope.key=1");
  EXPECT_NE(job.exit_code, 0) << job.output;
  const bool named = contains(job.output, "error: rank 0 of 2: --set: unknown key 'nope.key'") ||
                     contains(job.output, "error: rank 1 of 2: --set: unknown key 'nope.key'");
  EXPECT_TRUE(named) << job.output;
  EXPECT_LT(job.seconds, 30.0);
}

TEST_F(JobFailure, ASingleRankCliKeepsItsOneLineError) {
  FILE* pipe = popen((std::string(TESSERA_BINARY) + " train --set nope.key=1 2>&1").c_str(), "r");
  std::string output;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_EQ(output, "error: --set: unknown key 'nope.key'\n");
}

}  // namespace
}  // namespace tessera::dist
