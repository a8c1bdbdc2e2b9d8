// The bounds on parsing and rendering a chat template. A template comes from a model folder and
// what it renders from the network, so neither may make a render crash, hang or take unbounded
// memory: every bound passed is an Error naming the bound.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tessera/core/error.h"

namespace tessera::jinja {

inline constexpr size_t kMaxTemplateBytes = size_t{4} << 20;
// Blocks within blocks and brackets within brackets, as the parser descends.
inline constexpr int kMaxParseNesting = 100;
// The height of one expression's tree: long chains such as a + b + c + ... count too.
inline constexpr int kMaxExpressionHeight = 200;
// Statements and expressions being evaluated at once, macro calls included: what bounds the
// renderer's use of the stack.
inline constexpr int kMaxEvalDepth = 400;
inline constexpr int kMaxMacroDepth = 32;
// Lists, dicts and JSON within each other.
inline constexpr int kMaxValueDepth = 64;

inline constexpr size_t kMaxOutputBytes = size_t{16} << 20;
// Any one string a template builds, and all of them together.
inline constexpr size_t kMaxStringBytes = size_t{16} << 20;
inline constexpr size_t kMaxAllocatedBytes = size_t{256} << 20;
inline constexpr int64_t kMaxRangeLength = 100'000;
inline constexpr int64_t kMaxLoopIterations = 1'000'000;
// Statements and expressions evaluated in one render.
inline constexpr int64_t kMaxSteps = 20'000'000;
// Elements of the lists and dicts built in one render, all together.
inline constexpr int64_t kMaxItems = 4'000'000;

// The bounds that add up over a render, which a test may lower to reach them quickly.
struct BudgetLimits {
  int64_t steps = kMaxSteps;
  int64_t loop_iterations = kMaxLoopIterations;
  int64_t items = kMaxItems;
  size_t allocated_bytes = kMaxAllocatedBytes;
};

// What one render has used of the bounds that add up.
class Budget {
 public:
  explicit Budget(const BudgetLimits& limits = {}) : limits_(limits) {}

  void step(int64_t n = 1) {
    steps_ += n;
    check(steps_ <= limits_.steps, "the template took more than {} steps to render", limits_.steps);
  }
  // `n` elements of a list or dict about to be built.
  void items(int64_t n) {
    items_ += n;
    check(items_ <= limits_.items, "the template built more than {} list and dict elements",
          limits_.items);
  }
  void loop_iteration() {
    step();
    check(++iterations_ <= limits_.loop_iterations, "the template's loops ran more than {} times",
          limits_.loop_iterations);
  }
  // A new string of `bytes`.
  void string(size_t bytes) {
    check(bytes <= kMaxStringBytes, "the template built a string of {} bytes; the limit is {}",
          bytes, kMaxStringBytes);
    allocated_ += bytes;
    check(allocated_ <= limits_.allocated_bytes,
          "the template built more than {} bytes of strings in one render",
          limits_.allocated_bytes);
  }

 private:
  BudgetLimits limits_;
  int64_t steps_ = 0;
  int64_t items_ = 0;
  int64_t iterations_ = 0;
  size_t allocated_ = 0;
};

}  // namespace tessera::jinja
