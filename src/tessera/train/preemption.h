// SIGTERM, as preemptible VMs, Slurm and Kubernetes send it before they take the machine away,
// asks the run to stop at the next step boundary with a checkpoint and exit 0. The ranks agree on
// that boundary (stop_requested is collective), so one rank's signal stops them all. A second
// SIGTERM, or no checkpoint within the timeout, exits at once: the last committed checkpoint is
// left as it was.
#pragma once

#include <atomic>
#include <string>
#include <thread>

#include "tessera/comm/communicator.h"
#include "tessera/core/stop_signals.h"

namespace tessera::train {

class Preemption {
 public:
  // Takes SIGTERM (from the stop-signal thread, core/stop_signals.h) until destruction; `rank` and
  // `ranks` name this process in what it prints.
  Preemption(double timeout_s, int rank, int ranks);
  ~Preemption();
  Preemption(const Preemption&) = delete;
  Preemption& operator=(const Preemption&) = delete;

  // Collective over `world`: whether any rank has received SIGTERM.
  bool stop_requested(comm::Communicator& world);

 private:
  void watch();

  double timeout_s_;
  std::string who_;
  std::atomic<int> signals_{0};
  std::atomic<bool> from_launcher_{false};
  StopSignalHandler previous_;
  std::atomic<bool> done_{false};
  std::thread watchdog_;
};

}  // namespace tessera::train
