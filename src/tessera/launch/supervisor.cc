#include "tessera/launch/supervisor.h"

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tessera/core/error.h"
#include "tessera/core/stop_signals.h"

namespace tessera::launch {
namespace {

using Clock = std::chrono::steady_clock;

// Written by the stop-signal thread.
std::atomic<pid_t> g_child{0};
std::atomic<int> g_stop_signal{0};

// A stop signal is passed on to the job, which decides how to end; the supervisor then stops.
bool on_stop(int signal, pid_t) {
  g_stop_signal = signal;
  const pid_t child = g_child.load();
  if (child > 0) kill(child, signal);
  return true;
}

// What a shell returns for a command it cannot run; starting it again would fail the same way.
constexpr int kExitCannotStart = 127;

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  }
  return fmt::format("wait status {}", status);
}

int exit_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// In the forked child of a process with threads: argv is built before the fork, so that nothing
// is allocated before the exec.
[[noreturn]] void exec_child(char* const* argv) {
  unblock_stop_signals();
  execvp(argv[0], argv);
  std::fprintf(stderr, "supervisor: cannot start %s: %s\n", argv[0], std::strerror(errno));
  _exit(kExitCannotStart);
}

// Starts `command`, waits for it, and returns its wait status.
int run_attempt(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  for (const std::string& arg : command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  check(pid >= 0, "supervisor: cannot fork: {}", std::strerror(errno));
  if (pid == 0) exec_child(argv.data());
  g_child = pid;
  // A stop signal that arrived before the child was known is passed on now.
  if (const int signal = g_stop_signal.load(); signal != 0) kill(pid, signal);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    check(errno == EINTR, "supervisor: waiting for the job failed: {}", std::strerror(errno));
  }
  g_child = 0;
  return status;
}

void append_log(const std::filesystem::path& log, const nlohmann::json& entry) {
  if (log.empty()) return;
  std::error_code ec;
  if (log.has_parent_path()) std::filesystem::create_directories(log.parent_path(), ec);
  std::ofstream out(log, std::ios::app);
  out << entry.dump() << "\n";
  check(out.good(), "{}: cannot append to the restart log", log.string());
}

// Sleeps `seconds` unless a stop signal arrives first.
void back_off(double seconds) {
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
  while (Clock::now() < until && g_stop_signal.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

int supervise(const std::vector<std::string>& command, const SupervisorOptions& options) {
  check(!command.empty(), "supervisor: no command to run");
  check(options.max_restarts >= 0, "supervisor: --max-restarts must be >= 0, got {}",
        options.max_restarts);
  check(options.backoff_s >= 0, "supervisor: the back-off must be >= 0 s, got {}",
        options.backoff_s);
  take_stop_signals();
  on_stop_signal(on_stop);

  double backoff = options.backoff_s;
  for (int attempt = 1;; ++attempt) {
    const auto start = Clock::now();
    const auto started_at = std::chrono::system_clock::now();
    const int status = run_attempt(command);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const int code = exit_code(status);
    const std::string what = describe_status(status);
    std::string action_taken;
    bool again = false;
    if (code == 0) {
      action_taken = "done";
    } else if (g_stop_signal.load() != 0) {
      action_taken = fmt::format("stopped by signal {}", g_stop_signal.load());
    } else if (code == kExitDiverged) {
      action_taken = "diverged: not restarted";
    } else if (code == kExitCannotStart) {
      action_taken = "the command could not start: not restarted";
    } else if (attempt > options.max_restarts) {
      action_taken = fmt::format("gave up after {} restarts", options.max_restarts);
    } else {
      action_taken =
          fmt::format("restart {} of {} in {:g} s", attempt, options.max_restarts, backoff);
      again = true;
    }
    append_log(options.log,
               {{"attempt", attempt},
                {"started", std::chrono::duration<double>(started_at.time_since_epoch()).count()},
                {"seconds", seconds},
                {"exit_code", code},
                {"status", what},
                {"action", action_taken}});
    if (code != 0) {
      std::fprintf(stderr, "supervisor: attempt %d ended after %.1f s: %s; %s\n", attempt, seconds,
                   what.c_str(), action_taken.c_str());
    }
    if (!again) {
      if (code != 0 && attempt > options.max_restarts && options.max_restarts > 0) {
        std::fprintf(stderr,
                     "error: the job failed %d times (--max-restarts %d); the last attempt ended "
                     "with %s\n",
                     attempt, options.max_restarts, what.c_str());
      }
      return code;
    }
    back_off(backoff);
    if (g_stop_signal.load() != 0) return code;
    backoff = std::min(options.max_backoff_s, backoff * 2);
  }
}

}  // namespace tessera::launch
