// One training job at a time writes a run folder: a second one is refused with a message naming
// the folder and the job that holds it, and the lock goes when its holder does.
#include "tessera/train/run_folder.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>

#include "tessera/core/error.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

class RunFolderLockTest : public ::testing::Test {
 protected:
  void SetUp() override { run_ = testing::fresh_test_dir("tessera-run-lock"); }
  void TearDown() override { fs::remove_all(run_); }
  fs::path run_;
};

TEST_F(RunFolderLockTest, ASecondLockIsRefusedNamingTheFolderAndTheHolder) {
  const RunFolderLock held(run_);
  expect_error([&] { RunFolderLock second(run_); },
               {run_.string() + ": another training job", fmt::format("pid {} on host", ::getpid()),
                "choose another --out"});
}

TEST_F(RunFolderLockTest, AnotherProcessIsRefusedWhileTheLockIsHeld) {
  std::optional<RunFolderLock> held(std::in_place, run_);
  auto child_locks = [&] {
    const pid_t child = ::fork();
    if (child == 0) {
      try {
        RunFolderLock lock(run_);
      } catch (const Error&) {
        ::_exit(1);
      }
      ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  };
  EXPECT_FALSE(child_locks());
  held.reset();
  EXPECT_TRUE(child_locks());
}

TEST_F(RunFolderLockTest, TheLockGoesWithItsHolder) {
  { const RunFolderLock first(run_); }
  const RunFolderLock again(run_);
  EXPECT_TRUE(fs::is_regular_file(run_ / kRunFolderLockFile));
}

TEST_F(RunFolderLockTest, AFolderThatCannotHoldTheLockIsNamed) {
  expect_error([&] { RunFolderLock lock(run_ / "absent"); },
               {(run_ / "absent" / kRunFolderLockFile).string(), "cannot open"});
}

}  // namespace
}  // namespace tessera::train
