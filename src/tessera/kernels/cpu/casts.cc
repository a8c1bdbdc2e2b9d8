#include <algorithm>

#include "tessera/kernels/cpu/cpu_backend.h"
#include "tessera/kernels/cpu/low_precision_convert.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/op_profile.h"

namespace tessera::kernels::cpu {

namespace {

// Casts are memory-bound: below a few chunks, waking the thread team costs more than it saves.
constexpr int64_t kChunk = 1 << 15;

void cast_to_low(const Context&, const float* x, uint16_t* y, int64_t n, LowPrecision p) {
  const OpScope scope(OpClass::kConversions, 0, 6.0 * double(n));
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    to_low_serial(x + begin, y + begin, std::min(kChunk, n - begin), p);
  }
}

void cast_from_low(const Context&, const uint16_t* x, float* y, int64_t n, LowPrecision p) {
  const OpScope scope(OpClass::kConversions, 0, 6.0 * double(n));
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    from_low_serial(x + begin, y + begin, std::min(kChunk, n - begin), p);
  }
}

}  // namespace

void add_cast_kernels(Backend& backend) {
  backend.cast_to_low = cast_to_low;
  backend.cast_from_low = cast_from_low;
}

}  // namespace tessera::kernels::cpu
