#include "tessera/comm/world.h"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tessera/comm/mpi_communicator.h"
#include "tessera/comm/single_communicator.h"
#include "tessera/core/error.h"
#include "tessera/core/stop_signals.h"

namespace tessera::comm {
namespace {

std::unique_ptr<Communicator> g_world;
bool g_launched = false;
bool g_mpi = false;
int g_rank = 0;
int g_size = 1;
double g_timeout_s = 300;

bool has_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

bool started_by_launcher() {
  return has_env("OMPI_COMM_WORLD_SIZE") || has_env("PMIX_RANK") ||
         (has_env("PMI_RANK") && has_env("PMI_SIZE")) ||
         (has_env("SLURM_PROCID") && has_env("SLURM_NTASKS"));
}

// This rank and the job's size as the launcher's environment gives them, so that a rank stopped
// while MPI_Init still runs can name itself; false where the environment does not say both.
bool launcher_rank_and_size(int& rank, int& size) {
  for (const auto& [rank_name, size_name] :
       {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        std::pair{"PMI_RANK", "PMI_SIZE"}, std::pair{"SLURM_PROCID", "SLURM_NTASKS"}}) {
    if (has_env(rank_name) && has_env(size_name)) {
      rank = std::atoi(std::getenv(rank_name));
      size = std::atoi(std::getenv(size_name));
      return true;
    }
  }
  return false;
}

}  // namespace

int local_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"}) {
    if (has_env(name)) return std::atoi(std::getenv(name));
  }
  return 0;
}

namespace {

// When the launcher stops this rank (SIGTERM) because another rank failed, the rank says so
// rather than vanishing silently. A single-rank job has no other rank to blame.
void install_stop_handler() {
  if (g_size <= 1) return;
  on_stop_signal([](int signal, pid_t) {
    if (signal != SIGTERM) return false;
    exit_job("stopped by the launcher because another rank failed");
  });
}

void finalize() {
  // Sub-communicators still alive would be freed after MPI is gone; the world goes first.
  g_world.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// "error: rank R of N: message", or "error: message" in a single-rank job.
std::string error_line(std::string_view message) {
  if (!g_launched) return fmt::format("error: {}\n", message);
  return fmt::format("error: rank {} of {}: {}\n", g_rank, g_size, message);
}

}  // namespace

Communicator& init_world(int& argc, char**& argv) {
  if (g_world) abort_job("init_world called twice");
  // Before MPI or anything else starts a thread, so that every thread inherits the stop signals
  // blocked.
  take_stop_signals();
  if (!started_by_launcher()) {
    g_world = std::make_unique<SingleCommunicator>();
    return *g_world;
  }
  g_launched = true;
  // A rank can be stopped while MPI_Init still runs, when another has already failed.
  if (launcher_rank_and_size(g_rank, g_size)) install_stop_handler();
  // MPI's default error handler at this point ends the process with its own message.
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  g_mpi = true;
  std::atexit(finalize);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  install_stop_handler();
  g_world = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world");
  // Kernels run OpenMP threads while one thread talks to MPI, and a server's engine thread
  // talks to it after the main thread has loaded the model.
  if (provided < MPI_THREAD_SERIALIZED) {
    abort_job("this MPI library does not offer MPI_THREAD_SERIALIZED, which Tessera needs");
  }
  return *g_world;
}

Communicator& world() {
  check(g_world != nullptr, "comm::world() called before comm::init_world()");
  return *g_world;
}

void abort_job(const std::string& message) {
  std::fflush(stdout);
  std::fputs(error_line(message).c_str(), stderr);
  if (!g_mpi) std::exit(1);
  std::fflush(stderr);
  // The launcher stops every rank, this one included, and this rank must not claim that
  // another one failed.
  on_stop_signal({});
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this satisfies [[noreturn]] should it ever do so.
}

void exit_job(std::string_view message) {
  const std::string line = error_line(message);
  [[maybe_unused]] ssize_t written = write(STDERR_FILENO, line.data(), line.size());
  _exit(1);
}

void set_timeout_seconds(double seconds) {
  check(std::isfinite(seconds) && seconds > 0,
        "the communication timeout (dist.timeout_s) must be > 0 seconds, got {}", seconds);
  g_timeout_s = seconds;
}

double timeout_seconds() { return g_timeout_s; }

WaitDeadline::WaitDeadline(double seconds) : deadline_(after(seconds)), last_(Clock::now()) {}

bool WaitDeadline::passed() {
  const Clock::time_point now = Clock::now();
  if (now - last_ > kStoppedGap) deadline_ += now - last_;
  last_ = now;
  return now > deadline_;
}

WaitDeadline::Clock::time_point WaitDeadline::after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace tessera::comm
