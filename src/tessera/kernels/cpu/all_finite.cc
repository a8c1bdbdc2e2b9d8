#include <algorithm>
#include <bit>

#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels::cpu {

namespace {

bool all_finite(const Context&, const float* x, int64_t n) {
  const OpScope scope(OpClass::kOptimizer, 0, 4.0 * double(n));
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones only for inf and NaN
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  bool finite = true;
#pragma omp parallel for schedule(static) reduction(&& : finite) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    // A branch-free maximum over the exponent bits vectorises; an early exit would not.
    uint32_t largest = 0;
    for (int64_t i = begin; i < end; ++i) {
      largest = std::max(largest, std::bit_cast<uint32_t>(x[i]) & kExponent);
    }
    finite = finite && largest != kExponent;
  }
  return finite;
}

}  // namespace

void add_all_finite_kernels(Backend& backend) { backend.all_finite = all_finite; }

}  // namespace tessera::kernels::cpu
