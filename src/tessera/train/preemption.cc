#include "tessera/train/preemption.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>

#include "tessera/comm/flight_recorder.h"
#include "tessera/core/error.h"
#include "tessera/core/stop_signals.h"

namespace tessera::train {
namespace {

constexpr int kExitTerminated = 128 + SIGTERM;
constexpr std::chrono::milliseconds kWatchInterval{50};
// How often a rank stopped by the launcher looks in the flight records for the rank that ended.
constexpr int kLookForExitedEvery = 4;

void say(const std::string& text) {
  [[maybe_unused]] ssize_t written = write(STDERR_FILENO, text.data(), text.size());
}

}  // namespace

Preemption::Preemption(double timeout_s, int rank, int ranks)
    : timeout_s_(timeout_s), who_(ranks > 1 ? fmt::format("rank {} of {}: ", rank, ranks) : "") {
  previous_ = on_stop_signal([this, ranks](int signal, pid_t sender) {
    if (signal != SIGTERM) return false;
    if (signals_.fetch_add(1) > 0) {
      say(who_ + "second SIGTERM: exiting now; the last committed checkpoint is intact\n");
      _exit(kExitTerminated);
    }
    // A launcher also stops the ranks this way when another rank has failed.
    from_launcher_ = ranks > 1 && sender == getppid();
    say(who_ + (from_launcher_ ? "SIGTERM from the launcher, which also stops the job when another "
                                 "rank has failed: checkpointing at the next step boundary, then "
                                 "exiting\n"
                               : "SIGTERM: checkpointing at the next step boundary, then exiting "
                                 "(a second SIGTERM exits at once)\n"));
    return true;
  });
  watchdog_ = std::thread([this] { watch(); });
}

Preemption::~Preemption() {
  done_ = true;
  watchdog_.join();
  on_stop_signal(std::move(previous_));
}

bool Preemption::stop_requested(comm::Communicator& world) {
  double signalled = signals_.load() > 0 ? 1 : 0;
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
    if (from_launcher_.load() && !exited_named && tick % kLookForExitedEvery == 0) {
      if (const auto exited = comm::FlightRecorder::instance().exited_ranks_message()) {
        say(fmt::format("{}the launcher stops the job because {}\n", who_, *exited));
        exited_named = true;
      }
    }
    if (signals_.load() > 0 && deadline == Clock::time_point::max()) {
      deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_s_));
    }
    if (Clock::now() >= deadline) {
      const std::string message = fmt::format(
          "error: {}SIGTERM arrived {:g} s ago and no checkpoint could be committed since "
          "(checkpoint.preempt_timeout_s); exiting; the last committed checkpoint is intact\n",
          who_, timeout_s_);
      say(message);
      _exit(kExitTerminated);
    }
    std::this_thread::sleep_for(kWatchInterval);
  }
}

}  // namespace tessera::train
