// SIGTERM and SIGINT go to the stop-signal thread, never to a thread they would interrupt (where a
// returning handler's frame can land in the heap under a JIT kernel's stack pointer); a signal
// without a handler, or one its handler declines, ends the process as it would have; a replaced
// handler is no longer called. Each case runs in a forked child, whose exit status says what
// happened.
#include "tessera/core/stop_signals.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <functional>
#include <thread>
#include <vector>

namespace tessera {
namespace {

constexpr int kOnItsOwnThread = 10, kOnAnInterruptedThread = 11, kOldHandlerCalled = 12;

// The child's main thread and its spinning threads: none of them may run a handler.
std::vector<pthread_t> g_working;

// Runs `body` in a child that takes the stop signals and has `busy` threads spinning (as compute
// threads would), then sends it `signals` once it is ready; returns its wait status.
int child_status(const std::function<void()>& body, const std::vector<int>& signals, int busy = 3) {
  int ready[2];
  EXPECT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    take_stop_signals();
    body();
    g_working.push_back(pthread_self());
    for (int i = 0; i < busy; ++i) {
      std::thread spinning([] {
        volatile double x = 0;
        while (true) x = x + 1;
      });
      g_working.push_back(spinning.native_handle());
      spinning.detach();
    }
    [[maybe_unused]] ssize_t written = write(ready[1], "r", 1);
    while (true) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  char byte = 0;
  EXPECT_EQ(read(ready[0], &byte, 1), 1);
  for (int signal : signals) {
    kill(pid, signal);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  close(ready[0]);
  close(ready[1]);
  return status;
}

TEST(StopSignals, TheHandlerRunsOnTheStopSignalThreadAlone) {
  const int status = child_status(
      [] {
        on_stop_signal([](int signal, pid_t sender) {
          if (signal != SIGTERM || sender != getppid()) _exit(1);
          for (pthread_t t : g_working) {
            if (pthread_equal(pthread_self(), t)) _exit(kOnAnInterruptedThread);
          }
          _exit(kOnItsOwnThread);
          return true;
        });
      },
      {SIGTERM});
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kOnItsOwnThread);
}

TEST(StopSignals, WithoutAHandlerTheSignalEndsTheProcessAsItWould) {
  const int status = child_status([] {}, {SIGTERM});
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(StopSignals, ASignalTheHandlerDeclinesEndsTheProcess) {
  const int status =
      child_status([] { on_stop_signal([](int signal, pid_t) { return signal == SIGTERM; }); },
                   {SIGTERM, SIGTERM, SIGINT});
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

TEST(StopSignals, AReplacedHandlerIsNotCalled) {
  const int status = child_status(
      [] {
        on_stop_signal([](int, pid_t) -> bool { _exit(kOldHandlerCalled); });
        const StopSignalHandler old = on_stop_signal([](int, pid_t) -> bool { _exit(0); });
        if (!old) _exit(1);
      },
      {SIGINT});
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace tessera
