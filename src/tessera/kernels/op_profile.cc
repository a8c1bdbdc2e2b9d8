#include "tessera/kernels/op_profile.h"

#include <atomic>
#include <mutex>

namespace tessera::kernels {

namespace {

std::atomic<bool> recording{false};
// Set while a counted call runs: the calls it makes, on any of its threads, are its own work.
std::atomic<bool> inside{false};
std::mutex totals_mutex;
OpProfile totals;

}  // namespace

std::string_view op_class_name(OpClass c) {
  switch (c) {
    case OpClass::kMatmul:
      return "matmul";
    case OpClass::kAttention:
      return "attention";
    case OpClass::kNormsActivations:
      return "norms/activations";
    case OpClass::kConversions:
      return "conversions";
    case OpClass::kLoss:
      return "loss";
    case OpClass::kOptimizer:
      return "optimizer";
  }
  return "?";
}

void start_op_profile() {
  std::lock_guard lock(totals_mutex);
  totals = {};
  recording.store(true, std::memory_order_relaxed);
}

OpProfile stop_op_profile() {
  recording.store(false, std::memory_order_relaxed);
  std::lock_guard lock(totals_mutex);
  return totals;
}

OpScope::OpScope(OpClass op, double flops, double bytes) : op_(op), flops_(flops), bytes_(bytes) {
  if (!recording.load(std::memory_order_relaxed) || inside.exchange(true)) return;
  counted_ = true;
  start_ = std::chrono::steady_clock::now();
}

OpScope::~OpScope() {
  if (!counted_) return;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  {
    std::lock_guard lock(totals_mutex);
    OpTotals& t = totals[int(op_)];
    t.seconds += s;
    t.flops += flops_;
    t.bytes += bytes_;
    ++t.calls;
  }
  inside.store(false);
}

}  // namespace tessera::kernels
