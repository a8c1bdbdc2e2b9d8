// How calibration times the engine's kernels on a machine other processes share.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace tessera::plan {

// Times calls in interleaved rounds, so that a slow spell of a shared machine spoils one round
// rather than all of a call's runs. A call's time is its fastest run. A kernel's run counts the
// lesser of its wall time and the process's CPU time: when another process takes the core from
// a one-thread run, its wall time stretches but its CPU time does not (with more threads the CPU
// time exceeds the wall time). Communication counts wall time: waiting for a peer takes no CPU.
class KernelTimer {
 public:
  // Every call runs once to warm up, then kRounds times twice (the second run finds its operands
  // in cache), or once for calls that stream from DRAM anyway.
  static constexpr int kRounds = 3;
  enum class Work { kInCache, kFromDram, kCommunication };

  // Returns the call's id for seconds().
  size_t add(std::function<void()> call, Work work = Work::kInCache);
  void run_rounds();
  double seconds(size_t id) const { return best_[id]; }

 private:
  struct Call {
    std::function<void()> run;
    Work work;
  };
  std::vector<Call> calls_;
  std::vector<double> best_;
};

}  // namespace tessera::plan
