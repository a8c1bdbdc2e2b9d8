// What the CUDA backend's tests share: a fixture holding one CUDA context per test suite (every
// test skips, saying why, where this machine has no CUDA device), operands kept twice so that one
// call runs on the CPU and on the device with the same arguments, and comparisons that name the
// worst element when the device disagrees with the CPU.
//
// The CPU kernels are the reference: each test runs the same inputs through both and compares.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"

namespace tessera::kernels::cuda_testing {

// One CUDA context for the whole test suite: opening one costs a stream, cuBLASLt's handle and
// tens of MiB of workspace, too much to repeat for every test.
class CudaTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (cuda_device_count() == 0) return;
    try {
      device_ = std::make_unique<DeviceContext>(Device{DeviceKind::kCuda, 0});
    } catch (const Error& e) {
      // A device that is present but cannot be opened is a failure, not a reason to skip.
      open_error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    device_.reset();
    open_error_.clear();
  }

  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "SKIPPED: no CUDA device (" << kernels::cuda_unavailable_reason() << ")";
    }
    ASSERT_NE(device_, nullptr) << "CUDA device 0 is present but could not be opened: "
                                << open_error_;
  }

  static const Context& gpu() { return device_->context(); }

 private:
  static inline std::unique_ptr<DeviceContext> device_;
  static inline std::string open_error_;
};

// An operand kept twice, from the same values: a host vector for the CPU kernel and device memory
// for the CUDA kernel, so a test writes each call once and runs it on both contexts.
template <typename T>
class Twin {
 public:
  Twin(const Context& gpu, std::vector<T> values)
      : gpu_(&gpu), host_(std::move(values)), device_(gpu, int64_t(host_.size())) {
    copy_to_device(gpu, device_.data(), host_.data(), sizeof(T) * host_.size());
  }

  // The copy a kernel running on ctx works on. Chosen by which context it is rather than by its
  // device kind, so the helper does not depend on how the context describes itself.
  T* on(const Context& ctx) { return &ctx == gpu_ ? device_.data() : host_.data(); }

  const std::vector<T>& cpu() const { return host_; }
  std::vector<T> cuda() const {
    std::vector<T> out(host_.size());
    copy_to_host(*gpu_, out.data(), device_.data(), sizeof(T) * out.size());
    return out;
  }
  // Sets both copies to `values`, e.g. the CPU's results of one step, so the next step is checked
  // on identical inputs instead of inheriting the first step's rounding differences.
  void assign(const std::vector<T>& values) {
    host_ = values;
    copy_to_device(*gpu_, device_.data(), host_.data(), sizeof(T) * host_.size());
  }

 private:
  const Context* gpu_;
  std::vector<T> host_;
  DeviceArray<T> device_;
};

// Runs `call(ctx)` on the CPU and then on the device, and waits for the device.
template <typename Call>
void on_both(const Context& gpu, Call call) {
  call(kCpuContext);
  call(gpu);
  synchronize(gpu);
}

// How far the device may stray from the CPU: |cuda - cpu| <= tolerance * scale, where scale is
// max(|cpu|, floor * the largest |cpu| of the tensor).
struct Bound {
  double tolerance;
  double floor;
};
// Values each computed by a few operations without cancellation (an exponential, a quotient, a
// bias added): every element is held to its own magnitude, down to a tiny floor.
constexpr Bound kF32Element{1e-5, 1e-6};
// Sums (matmuls, norms, attention, gradients accumulated over rows) and differences of nearly
// equal terms (rope's rotation, gelu's 1 + tanh): their rounding error scales with the terms, not
// with the result, so an element that nearly cancels is held to the tensor's largest magnitude.
// Measured against the double kernels, the CPU's f32 kernels stay within about 1e-6 on this
// scale, while their per-element error reaches 0.4 (attention's dqkv) on near-zero elements.
constexpr Bound kF32Tensor{1e-5, 1.0};
// Low-precision matmuls and linears on the same bf16/f16 bit patterns on both sides.
constexpr Bound kLowTensor{2e-2, 1.0};
// Copies and single correctly rounded operations (a + b, x * s): the same bits on every device.
constexpr Bound kExact{0.0, 0.0};

inline std::string format_value(double v) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", v);
  return text;
}

// Compares the device's result with the CPU's element by element and, when they disagree, names
// the worst element: its index, both values, the error and the scale it was measured against.
// NaN agrees with NaN and an infinity with itself, so untouched padding compares equal.
template <typename T>
::testing::AssertionResult agrees(const std::vector<T>& cpu, const std::vector<T>& cuda,
                                  Bound bound) {
  if (cpu.size() != cuda.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: cpu " << cpu.size() << ", cuda " << cuda.size();
  }
  double largest = 0;
  for (T v : cpu) {
    if (std::isfinite(double(v))) largest = std::max(largest, std::fabs(double(v)));
  }
  const double floor = bound.floor * largest;
  auto scale_of = [&](double a) {
    return std::isfinite(a) ? std::max(std::fabs(a), floor) : floor;
  };
  size_t worst = 0, failures = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < cpu.size(); ++i) {
    const double a = double(cpu[i]), b = double(cuda[i]);
    if ((std::isnan(a) && std::isnan(b)) || a == b) continue;
    const double scale = scale_of(a);
    const double error = std::fabs(b - a);
    // A NaN or an infinity on one side only is as wrong as it gets.
    const double ratio = std::isfinite(error) ? (scale > 0 ? error / scale : INFINITY) : INFINITY;
    const bool within = std::isfinite(error) && error <= bound.tolerance * scale;
    if (!within) ++failures;
    if (!within && ratio > worst_ratio) worst = i, worst_ratio = ratio;
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << failures << " of " << cpu.size() << " elements differ; worst at index " << worst
         << ": cpu " << format_value(double(cpu[worst])) << ", cuda "
         << format_value(double(cuda[worst])) << ", error "
         << format_value(std::fabs(double(cuda[worst]) - double(cpu[worst]))) << " = "
         << format_value(worst_ratio) << " x scale " << format_value(scale_of(double(cpu[worst])))
         << " (allowed " << format_value(bound.tolerance) << "; scale = max(|cpu|, "
         << format_value(bound.floor) << " x largest |cpu| " << format_value(largest) << "))";
}

// Compares a twin's device copy with its CPU copy.
template <typename T>
::testing::AssertionResult agrees(const Twin<T>& t, Bound bound) {
  return agrees(t.cpu(), t.cuda(), bound);
}

// Scalars returned to the host (sum_squares): |cuda - cpu| <= tolerance * |cpu|.
inline ::testing::AssertionResult agrees_relative(double cpu, double cuda, double tolerance) {
  const double error = std::fabs(cuda - cpu);
  if (error <= tolerance * std::fabs(cpu)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "cpu " << format_value(cpu) << ", cuda " << format_value(cuda) << ", relative error "
         << format_value(cpu != 0 ? error / std::fabs(cpu) : INFINITY) << " (allowed "
         << format_value(tolerance) << ")";
}

// n token ids below `vocab`, with repeats once n exceeds it (embedding gradients must sum them).
inline std::vector<int32_t> random_tokens(size_t n, int64_t vocab, uint64_t seed) {
  CounterRng rng(seed, 1);
  std::vector<int32_t> ids(n);
  for (size_t i = 0; i < n; ++i) ids[i] = int32_t(rng.below(i, uint64_t(vocab)));
  return ids;
}

}  // namespace tessera::kernels::cuda_testing
