#include "tessera/core/q8_0.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

TEST(Q8_0, BlocksHoldAScaleAndRoundedValues) {
  std::vector<float> values(64);
  for (int i = 0; i < 64; ++i) values[i] = (i < 32 ? 0.01f : -3.0f) * float(i - 16);
  values[5] = 0.0f;
  std::vector<uint8_t> blocks(2 * kQ8BlockBytes);
  quantize_q8_0(values, blocks);
  for (int b = 0; b < 2; ++b) {
    uint16_t half;
    std::memcpy(&half, blocks.data() + b * kQ8BlockBytes, 2);
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(values[b * 32 + i]));
    EXPECT_EQ(half, f32_to_f16(amax / 127.0f));
    for (int i = 0; i < 32; ++i) {
      const int8_t q = int8_t(blocks[b * kQ8BlockBytes + 2 + i]);
      EXPECT_EQ(q, int8_t(std::round(values[b * 32 + i] * (1.0f / (amax / 127.0f)))))
          << b << " " << i;
      EXPECT_NEAR(f16_to_f32(half) * q, values[b * 32 + i], amax / 127.0f) << b << " " << i;
    }
  }
  std::vector<float> zeros(32, 0.0f);
  std::vector<uint8_t> zero_block(kQ8BlockBytes, 0xff);
  quantize_q8_0(zeros, zero_block);
  EXPECT_EQ(zero_block, std::vector<uint8_t>(kQ8BlockBytes, 0));
  std::vector<uint8_t> wrong(kQ8BlockBytes);
  EXPECT_THROW(quantize_q8_0(values, wrong), Error);
}

TEST(Q8_0, ValuesReadBackAsTheirBlocksScaleTimesTheirInteger) {
  std::vector<float> values(96);
  for (int i = 0; i < 96; ++i) values[i] = std::sin(0.37f * float(i)) * float(1 + i / 32);
  std::vector<uint8_t> blocks(3 * kQ8BlockBytes);
  quantize_q8_0(values, blocks);
  std::vector<float> back(96);
  dequantize_q8_0(blocks, back);
  for (int b = 0; b < 3; ++b) {
    uint16_t half;
    std::memcpy(&half, blocks.data() + b * kQ8BlockBytes, 2);
    for (int i = 0; i < 32; ++i) {
      const int8_t q = int8_t(blocks[b * kQ8BlockBytes + 2 + i]);
      EXPECT_EQ(back[b * 32 + i], f16_to_f32(half) * float(q)) << b << " " << i;
      // Half a step, plus up to 127 times the scale's rounding to f16 (2^-11 of it).
      EXPECT_NEAR(back[b * 32 + i], values[b * 32 + i], 0.57f * f16_to_f32(half));
    }
  }
  // A second round trip changes nothing: dequantised values are what their blocks hold.
  std::vector<uint8_t> again(blocks.size());
  quantize_q8_0(back, again);
  std::vector<float> twice(96);
  dequantize_q8_0(again, twice);
  EXPECT_EQ(twice, back);
  std::vector<float> short_values(95);
  EXPECT_THROW(dequantize_q8_0(blocks, short_values), Error);
}

}  // namespace
}  // namespace tessera
