#include "tessera/launch/supervisor.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace tessera::launch {
namespace {

namespace fs = std::filesystem;

class Supervisor : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::vector<std::string> log_lines() const {
    std::ifstream in(dir / "restarts.jsonl");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  SupervisorOptions options(int max_restarts) const {
    return {.max_restarts = max_restarts, .backoff_s = 0, .log = dir / "restarts.jsonl"};
  }
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-supervisor-" + std::to_string(getpid()));
};

TEST_F(Supervisor, RestartsAFailingJobUntilItSucceeds) {
  const std::string marker = (dir / "attempts").string();
  // Fails twice, then succeeds.
  const std::string script = "echo x >> " + marker + "; test $(wc -l < " + marker + ") -ge 3";
  EXPECT_EQ(supervise({"sh", "-c", script}, options(5)), 0);
  const auto lines = log_lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("\"action\":\"restart 1 of 5"), std::string::npos) << lines[0];
  EXPECT_NE(lines[2].find("\"action\":\"done\""), std::string::npos) << lines[2];
}

TEST_F(Supervisor, GivesUpAfterMaxRestartsWithTheLastStatus) {
  EXPECT_EQ(supervise({"sh", "-c", "exit 7"}, options(2)), 7);
  const auto lines = log_lines();
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[2].find("gave up after 2 restarts"), std::string::npos) << lines[2];
}

TEST_F(Supervisor, NeverRestartsADivergedJob) {
  EXPECT_EQ(supervise({"sh", "-c", "exit 3"}, options(4)), kExitDiverged);
  EXPECT_EQ(log_lines().size(), 1u);
}

TEST_F(Supervisor, AKilledJobIsRestartedAndItsSignalReported) {
  const std::string marker = (dir / "killed").string();
  const std::string script = "test -f " + marker + " || { touch " + marker + "; kill -9 $$; }";
  EXPECT_EQ(supervise({"sh", "-c", script}, options(1)), 0);
  const auto lines = log_lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("killed by signal 9"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"exit_code\":137"), std::string::npos) << lines[0];
}

TEST_F(Supervisor, ACommandThatCannotStartIsReported) {
  EXPECT_EQ(supervise({"/nonexistent/tessera-job"}, options(0)), 127);
}

}  // namespace
}  // namespace tessera::launch
