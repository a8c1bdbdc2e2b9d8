#include "tessera/train/preemption.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "tessera/core/error.h"
#include "tessera/dist/flight_recorder.h"

namespace tessera::train {
namespace {

// The handler may only touch lock-free atomics and call async-signal-safe functions.
std::atomic<int> g_signals{0};
std::atomic<bool> g_from_launcher_seen{false};
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free);

constexpr int kExitTerminated = 128 + SIGTERM;
constexpr std::chrono::milliseconds kWatchInterval{50};
// How often a rank stopped by the launcher looks in the flight records for the rank that ended.
constexpr int kLookForExitedEvery = 4;

// Formatted before any signal arrives, since the handler cannot format.
char g_first[192], g_from_launcher[256], g_second[160];

void say(const char* text) {
  [[maybe_unused]] ssize_t written = write(STDERR_FILENO, text, std::strlen(text));
}

void on_sigterm(int, siginfo_t* info, void*) {
  if (g_signals.fetch_add(1) == 0) {
    // A launcher also stops the ranks this way when another rank has failed.
    const bool launcher =
        g_from_launcher[0] != '\0' && info != nullptr && info->si_pid == getppid();
    g_from_launcher_seen = launcher;
    say(launcher ? g_from_launcher : g_first);
    return;
  }
  say(g_second);
  _exit(kExitTerminated);
}

struct sigaction g_previous;

}  // namespace

Preemption::Preemption(double timeout_s, int rank, int ranks) : timeout_s_(timeout_s) {
  const std::string who = ranks > 1 ? fmt::format("rank {} of {}: ", rank, ranks) : "";
  std::snprintf(g_first, sizeof g_first,
                "%sSIGTERM: checkpointing at the next step boundary, then exiting (a second "
                "SIGTERM exits at once)\n",
                who.c_str());
  g_from_launcher[0] = '\0';
  if (ranks > 1) {
    std::snprintf(g_from_launcher, sizeof g_from_launcher,
                  "%sSIGTERM from the launcher, which also stops the job when another rank has "
                  "failed: checkpointing at the next step boundary, then exiting\n",
                  who.c_str());
  }
  std::snprintf(g_second, sizeof g_second,
                "%ssecond SIGTERM: exiting now; the last committed checkpoint is intact\n",
                who.c_str());
  who_ = who;
  g_signals = 0;
  g_from_launcher_seen = false;
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_sigaction = on_sigterm;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  check(sigaction(SIGTERM, &action, &g_previous) == 0, "cannot install the SIGTERM handler: {}",
        std::strerror(errno));
  watchdog_ = std::thread([this] { watch(); });
}

Preemption::~Preemption() {
  done_ = true;
  watchdog_.join();
  sigaction(SIGTERM, &g_previous, nullptr);
}

bool Preemption::stop_requested(dist::Communicator& world) {
  double signalled = g_signals.load() > 0 ? 1 : 0;
  if (world.size() > 1) world.all_reduce(&signalled, 1);
  return signalled > 0;
}

// Once a SIGTERM has arrived, the run has timeout_s to reach a step boundary and commit. When the
// launcher sent it, this rank names the rank whose end made the launcher stop the job, once the
// flight records show one.
void Preemption::watch() {
  using Clock = std::chrono::steady_clock;
  Clock::time_point deadline = Clock::time_point::max();
  bool exited_named = false;
  for (int64_t tick = 0; !done_; ++tick) {
    if (g_from_launcher_seen.load() && !exited_named && tick % kLookForExitedEvery == 0) {
      if (const auto exited = dist::FlightRecorder::instance().exited_ranks_message()) {
        say(fmt::format("{}the launcher stops the job because {}\n", who_, *exited).c_str());
        exited_named = true;
      }
    }
    if (g_signals.load() > 0 && deadline == Clock::time_point::max()) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s_));
    }
    if (Clock::now() >= deadline) {
      const std::string message = fmt::format(
          "error: {}SIGTERM arrived {:g} s ago and no checkpoint could be committed since "
          "(checkpoint.preempt_timeout_s); exiting; the last committed checkpoint is intact\n",
          who_, timeout_s_);
      say(message.c_str());
      _exit(kExitTerminated);
    }
    std::this_thread::sleep_for(kWatchInterval);
  }
}

}  // namespace tessera::train
