#include "tessera/plan/kernel_timer.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace tessera::plan {

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

size_t KernelTimer::add(std::function<void()> call, Work work) {
  calls_.push_back({std::move(call), work});
  best_.push_back(std::numeric_limits<double>::infinity());
  return calls_.size() - 1;
}

void KernelTimer::run_rounds() {
  for (const Call& c : calls_) c.run();
  for (int round = 0; round < kRounds; ++round) {
    for (size_t i = 0; i < calls_.size(); ++i) {
      const Call& c = calls_[i];
      for (int run = 0; run < (c.work == Work::kFromDram ? 1 : 2); ++run) {
        const double cpu0 = cpu_seconds();
        const auto wall0 = std::chrono::steady_clock::now();
        c.run();
        const double wall =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
        const double cpu = c.work == Work::kCommunication ? wall : cpu_seconds() - cpu0;
        best_[i] = std::min({best_[i], wall, cpu});
      }
    }
  }
}

}  // namespace tessera::plan
