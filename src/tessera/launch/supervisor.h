// Keeps a training job running: starts it (one process, or a launcher such as mpirun or srun
// with its ranks), and when it fails, starts it again after a back-off, so that it resumes from
// its last committed checkpoint. Each attempt is logged. A job that succeeds, that was preempted
// (it exits 0 after its checkpoint), or that diverged (exit status kExitDiverged: a restart would
// diverge again) or that could not start is not restarted; after max_restarts failures the last one
// is final.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace tessera::launch {

// The exit status of a run that the divergence guard ended.
inline constexpr int kExitDiverged = 3;

struct SupervisorOptions {
  int max_restarts = 3;
  double backoff_s = 1;  // before the first restart; doubled after each, up to max
  double max_backoff_s = 60;
  std::filesystem::path log;  // JSON lines, one per attempt; empty: none
};

// Runs `command` (argv[0] looked up in PATH) until it needs no restart and returns its exit
// status (128 + N after signal N). SIGTERM and SIGINT are passed to the running attempt and stop
// further restarts.
int supervise(const std::vector<std::string>& command, const SupervisorOptions& options);

}  // namespace tessera::launch
