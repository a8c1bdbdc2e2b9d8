#include "tessera/core/stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <mutex>
#include <thread>
#include <utility>

namespace tessera {
namespace {

std::mutex g_mutex;
StopSignalHandler g_handler;

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// Ends the process as `signal` would: its default action, delivered to this thread unblocked.
[[noreturn]] void end_by(int signal) {
  std::signal(signal, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  raise(signal);
  _exit(128 + signal);
}

[[noreturn]] void take_forever() {
  const sigset_t set = stop_set();
  while (true) {
    siginfo_t info{};
    if (sigwaitinfo(&set, &info) < 0) continue;
    // Held while the handler runs, so that once on_stop_signal has replaced a handler the old
    // one is not running, and its owner may go.
    std::lock_guard lock(g_mutex);
    if (!g_handler || !g_handler(info.si_signo, info.si_pid)) end_by(info.si_signo);
  }
}

}  // namespace

void take_stop_signals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(take_forever).detach();
  });
}

StopSignalHandler on_stop_signal(StopSignalHandler handler) {
  std::lock_guard lock(g_mutex);
  return std::exchange(g_handler, std::move(handler));
}

void unblock_stop_signals() {
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

}  // namespace tessera
