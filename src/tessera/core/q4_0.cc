#include "tessera/core/q4_0.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {

float quantize_q4_0_block(const float* x, uint8_t* q) {
  float largest = 0, extreme = 0;
  for (int64_t j = 0; j < kQ4_0BlockSize; ++j) {
    if (largest < std::fabs(x[j])) {
      largest = std::fabs(x[j]);
      extreme = x[j];
    }
  }
  const float d = extreme / -8.0f;
  const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
  // A fused multiply-add, so that every machine rounds the same (as ggml's builds contract it).
  for (int64_t j = 0; j < kQ4_0BlockSize; ++j) {
    q[j] = uint8_t(std::min(15, int(int8_t(std::fma(x[j], inverse, 8.5f)))));
  }
  return d;
}

void quantize_q4_0(std::span<const float> values, std::span<uint8_t> blocks) {
  check(values.size() % kQ4_0BlockSize == 0 &&
            blocks.size() == values.size() / kQ4_0BlockSize * kQ4_0BlockBytes,
        "q4_0: {} values and {} bytes do not make whole blocks of {}", values.size(), blocks.size(),
        kQ4_0BlockSize);
  const int64_t n = int64_t(values.size()) / kQ4_0BlockSize;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n; ++b) {
    uint8_t q[kQ4_0BlockSize];
    const uint16_t d = f32_to_f16(quantize_q4_0_block(values.data() + b * kQ4_0BlockSize, q));
    uint8_t* block = blocks.data() + b * kQ4_0BlockBytes;
    std::memcpy(block, &d, sizeof d);
    for (int64_t j = 0; j < kQ4_0BlockSize / 2; ++j) {
      block[2 + j] = uint8_t(q[j] | q[j + kQ4_0BlockSize / 2] << 4);
    }
  }
}

}  // namespace tessera
