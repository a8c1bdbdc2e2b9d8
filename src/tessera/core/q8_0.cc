#include "tessera/core/q8_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {

namespace {

int64_t whole_blocks(size_t values, size_t bytes) {
  check(values % kQ8BlockSize == 0 && bytes == values / kQ8BlockSize * kQ8BlockBytes,
        "q8_0: {} values and {} bytes do not make whole blocks of {}", values, bytes, kQ8BlockSize);
  return int64_t(values) / kQ8BlockSize;
}

}  // namespace

void quantize_q8_0(std::span<const float> values, std::span<uint8_t> blocks) {
  const int64_t n = whole_blocks(values.size(), blocks.size());
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; ++b) {
    const float* x = values.data() + b * kQ8BlockSize;
    uint8_t* block = blocks.data() + b * kQ8BlockBytes;
    float amax = 0.0f;
    for (int64_t i = 0; i < kQ8BlockSize; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float scale = amax / 127.0f;
    const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
    const uint16_t half = f32_to_f16(scale);
    std::memcpy(block, &half, 2);
    for (int64_t i = 0; i < kQ8BlockSize; ++i) {
      block[2 + i] = uint8_t(int8_t(std::round(x[i] * inverse)));
    }
  }
}

void dequantize_q8_0(std::span<const uint8_t> blocks, std::span<float> values) {
  const int64_t n = whole_blocks(values.size(), blocks.size());
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; ++b) {
    const uint8_t* block = blocks.data() + b * kQ8BlockBytes;
    uint16_t half;
    std::memcpy(&half, block, 2);
    const float scale = f16_to_f32(half);
    const int8_t* q = reinterpret_cast<const int8_t*>(block + 2);
    float* x = values.data() + b * kQ8BlockSize;
    for (int64_t i = 0; i < kQ8BlockSize; ++i) x[i] = scale * float(q[i]);
  }
}

}  // namespace tessera
