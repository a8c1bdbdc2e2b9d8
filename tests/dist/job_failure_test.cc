// How a multi-rank job ends when one rank fails. Each test launches its own small mpirun job, so
// these run only in a process that was not itself started by a launcher.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "tessera/comm/flight_record.h"
#include "tessera/comm/world.h"
#include "tessera/core/error.h"

namespace tessera::dist {
namespace {

struct JobResult {
  int exit_code;
  std::string output;  // stdout and stderr of every rank and of mpirun
  double seconds;
};

using Clock = std::chrono::steady_clock;

FILE* start_job(int ranks, const std::string& program_and_args) {
  const std::string command = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " +
                              std::string(TESSERA_MPIEXEC) + " --oversubscribe -np " +
                              std::to_string(ranks) + " " + program_and_args + " 2>&1";
  return popen(command.c_str(), "r");
}

// Reads the job's output until it ends; returns its exit code.
int finish_job(FILE* pipe, std::string& output) {
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

JobResult run_job(int ranks, const std::string& program_and_args) {
  const auto start = Clock::now();
  JobResult job;
  job.exit_code = finish_job(start_job(ranks, program_and_args), job.output);
  job.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return job;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class JobFailure : public ::testing::Test {
 protected:
  void SetUp() override {
    if (comm::world().size() > 1) GTEST_SKIP() << "starts its own mpirun jobs";
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

// Runs dist_probe `mode` on 3 ranks, in which rank 1 exits, and checks that ranks 0 and 2 each
// say why they stopped.
void expect_the_others_are_taken_down(const std::string& mode) {
  const JobResult job = run_job(3, std::string(TESSERA_DIST_PROBE) + " " + mode);
  EXPECT_NE(job.exit_code, 0) << job.output;
  for (int rank : {0, 2}) {
    EXPECT_TRUE(contains(job.output, "error: rank " + std::to_string(rank) +
                                         " of 3: stopped by the launcher because another rank "
                                         "failed"))
        << job.output;
  }
  EXPECT_LT(job.seconds, 30.0);
}

TEST_F(JobFailure, ARankThatDiesTakesTheOthersDownWithAMessage) {
  expect_the_others_are_taken_down("exit");
}

TEST_F(JobFailure, ARankThatDiesWhileTheOthersStartMpiTakesThemDownWithAMessage) {
  expect_the_others_are_taken_down("exit-at-start");
}

// The acceptance test of the flight recorder: SIGSTOP one rank of a job that all-reduces in a
// loop (dist.timeout_s = 3), and every rank ends within the timeout and 10 s, with a message that
// names the stopped rank and the pending all_reduce, and both ranks' records on disk.
TEST_F(JobFailure, AStoppedRankIsNamedFromTheFlightRecords) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera-flight-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  FILE* pipe = start_job(2, std::string(TESSERA_DIST_PROBE) + " all-reduce " + dir.string());
  std::string output;
  std::atomic<bool> ended = false;
  int exit_code = 0;
  std::thread reader([&] {
    exit_code = finish_job(pipe, output);
    ended = true;
  });

  // Rank 1 is stopped once its record shows it all-reducing.
  std::optional<comm::RankRecord> before;
  for (auto give_up = Clock::now() + std::chrono::seconds(20); Clock::now() < give_up && !ended;
       std::this_thread::sleep_for(std::chrono::milliseconds(50))) {
    before = comm::read_record_file(dir / "rank-1.json");
    if (before && std::any_of(before->communicators.begin(), before->communicators.end(),
                              [](const comm::FlightCommunicator& c) {
                                return c.name == "dp" && c.collectives_completed > 0;
                              })) {
      break;
    }
    before.reset();
  }
  ASSERT_TRUE(before.has_value()) << "rank 1 wrote no flight record showing an all_reduce";
  const pid_t stopped = pid_t(before->pid);
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  const auto stopped_at = Clock::now();
  const auto limit = std::chrono::seconds(3 + 10);
  while (!ended && Clock::now() - stopped_at < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  if (!ended) kill(stopped, SIGKILL);  // so that the test ends, failing below
  reader.join();

  EXPECT_TRUE(ended) << "the job ran on " << seconds << " s after the SIGSTOP";
  EXPECT_NE(exit_code, 0) << output;
  const std::optional<comm::RankRecord> waiting = comm::read_record_file(dir / "rank-0.json");
  ASSERT_TRUE(waiting.has_value()) << output;
  EXPECT_TRUE(comm::read_record_file(dir / "rank-1.json").has_value());
  // Rank 0's last record holds the all_reduce it gave up on.
  const comm::FlightOp* pending = nullptr;
  for (const comm::FlightOp& op : waiting->operations) {
    if (op.pending()) pending = &op;
  }
  ASSERT_NE(pending, nullptr) << output;
  EXPECT_EQ(pending->op, "all_reduce");
  EXPECT_EQ(waiting->communicators.at(pending->communicator).name, "dp");
  const std::string message = "error: rank 0 of 2: all_reduce #" + std::to_string(pending->seq) +
                              " of 256 f32 elements on dp (2 ranks) did not complete within 3 s: "
                              "rank 1 (pid " +
                              std::to_string(stopped) + " on host " + before->host +
                              ") stopped responding ";
  EXPECT_TRUE(contains(output, message)) << "expected '" << message << "' in\n" << output;
  EXPECT_TRUE(contains(output, "flight records in " + dir.string())) << output;
  EXPECT_FALSE(contains(output, "error: rank 1 of 2: all_reduce")) << "the stopped rank blames "
                                                                   << "another:\n"
                                                                   << output;
  std::filesystem::remove_all(dir);
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
