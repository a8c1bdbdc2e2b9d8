// Where a step's time goes by class of kernel, for the benchmarks' per-step profile: while a
// profile records, every CPU kernel call adds its wall time and its work (FLOPs for products,
// bytes it must read and write for the rest) to its class. Only the outermost call counts, on
// whichever thread: a gemm that attention runs inside its parallel loop is attention's time.
// Not recording, a call costs one relaxed atomic load. Kernels on a CUDA context return before
// their work is done and are not counted.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace tessera::kernels {

enum class OpClass {
  kMatmul,            // linear layers' and other gemms
  kAttention,         // attention forward and backward (their inner gemms included)
  kNormsActivations,  // norms, GELU/SwiGLU, RoPE, residual adds, biases, embeddings
  kConversions,       // casts between f32 and bf16/f16
  kLoss,              // softmax cross-entropy
  kOptimizer,         // AdamW, gradient norms and scaling, finiteness checks
};
inline constexpr int kOpClasses = 6;
std::string_view op_class_name(OpClass c);

struct OpTotals {
  double seconds = 0, flops = 0, bytes = 0;
  int64_t calls = 0;
};
using OpProfile = std::array<OpTotals, kOpClasses>;

// Clears the totals and starts counting; stop returns what was counted since.
void start_op_profile();
OpProfile stop_op_profile();

class OpScope {
 public:
  OpScope(OpClass op, double flops, double bytes);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpClass op_;
  double flops_, bytes_;
  bool counted_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tessera::kernels
