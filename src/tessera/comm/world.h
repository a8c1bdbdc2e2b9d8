// Starting and ending the ranks of a job. A job is either one process started directly (no MPI
// at all) or several started by an MPI launcher (mpirun, srun), one process per rank. Whatever
// goes wrong on one rank must end every rank with a message naming it, never leave the others
// waiting forever.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "tessera/comm/communicator.h"

namespace tessera::comm {

// Sets up this process's world communicator. Under a launcher (it sets OMPI_COMM_WORLD_SIZE,
// PMIX_RANK, PMI_RANK with PMI_SIZE, or SLURM_PROCID with SLURM_NTASKS) this initialises MPI with
// MPI_THREAD_SERIALIZED: one thread at a time may communicate (the server's engine thread once the
// model is loaded, the main thread otherwise). Otherwise the
// world is a single rank and MPI is never touched. MPI is finalised at exit. Call once, at the
// start of main (MPI may remove its own arguments from argv); a failure ends the process. It first
// gives SIGTERM and SIGINT to a thread of their own (take_stop_signals), before any other starts.
// In a job of several ranks, from before MPI_Init on, a SIGTERM from the launcher (another rank
// failed) ends this rank with "error: rank R of N: stopped by the launcher because another rank
// failed" rather than silently; a later on_stop_signal handler replaces that one.
Communicator& init_world(int& argc, char**& argv);

// The communicator of all ranks of the job; init_world must have run.
Communicator& world();

// This rank's place among the job's ranks on its host, as the launcher's environment gives it
// (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, Slurm's SLURM_LOCALID, or LOCAL_RANK); 0 where none
// does. A rank takes the GPU of this number.
int local_rank();

// Prints "error: rank R of N: message" on stderr and ends every rank of the job. A single rank
// prints "error: message" and exits with status 1.
[[noreturn]] void abort_job(const std::string& message);

// abort_job for the other threads of a process, which may not call MPI: writes the same line with
// write(2) and exits with status 1, upon which the launcher stops the other ranks.
[[noreturn]] void exit_job(std::string_view message);

// How long one blocking operation, or one wait, may take before this rank concludes that another
// has failed or stopped and ends the job (default 300 s).
void set_timeout_seconds(double seconds);
double timeout_seconds();

// The deadline of a wait for other ranks: `seconds` (the job's timeout) from its start. A look
// that finds more than kStoppedGap gone since the one before was made by a process stopped whole
// (SIGSTOP, a debugger); the time lost is not another rank's fault and moves the deadline on.
class WaitDeadline {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::seconds kStoppedGap{1};

  explicit WaitDeadline(double seconds = timeout_seconds());
  // Whether the deadline has passed, as of now.
  bool passed();
  static Clock::time_point after(double seconds);

 private:
  Clock::time_point deadline_, last_;
};

}  // namespace tessera::comm
