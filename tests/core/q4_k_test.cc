#include "tessera/core/q4_k.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {
namespace {

std::vector<float> decoded(const std::vector<uint8_t>& blocks) {
  std::vector<float> values(blocks.size() / kQ4KBlockBytes * kQ4KBlockSize);
  for (size_t b = 0; b < blocks.size() / kQ4KBlockBytes; ++b) {
    const Q4KBlockView block{blocks.data() + b * kQ4KBlockBytes};
    for (int64_t i = 0; i < kQ4KBlockSize; ++i) {
      uint8_t sc, m;
      block.scale_min(i / kQ4KSubBlockSize, sc, m);
      values[b * kQ4KBlockSize + size_t(i)] =
          f16_to_f32(block.d()) * float(sc) * float(block.level(i)) -
          f16_to_f32(block.dmin()) * float(m);
    }
  }
  return values;
}

// Values spread over [-1, 1] in a pattern that is the same on every machine.
std::vector<float> patterned(int64_t n) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[size_t(i)] = float((i * 7919) % 2001 - 1000) / 1000.0f;
  return values;
}

TEST(Q4K, AZeroBlockIsZeroAndNonNegativeValuesKeepAZeroMin) {
  std::vector<float> values(2 * kQ4KBlockSize, 0.0f);
  for (int64_t i = kQ4KBlockSize; i < 2 * kQ4KBlockSize; ++i) values[i] = float(i % 16) / 15.0f;
  std::vector<uint8_t> blocks(2 * kQ4KBlockBytes);
  quantize_q4_k(values, blocks);
  const std::vector<float> back = decoded(blocks);
  for (int64_t i = 0; i < kQ4KBlockSize; ++i) EXPECT_EQ(back[i], 0.0f);
  EXPECT_EQ(f16_to_f32(Q4KBlockView{blocks.data() + kQ4KBlockBytes}.dmin()), 0.0f);
  for (int64_t i = kQ4KBlockSize; i < 2 * kQ4KBlockSize; ++i) {
    EXPECT_NEAR(back[i], values[i], 0.01f) << i;  // 16 levels of a 4-bit grid fit exactly
  }
}

TEST(Q4K, EachValueIsWithinAStepOfItsSubBlockAndTheErrorIsSmall) {
  const std::vector<float> values = patterned(64 * kQ4KBlockSize);
  std::vector<uint8_t> blocks(64 * kQ4KBlockBytes);
  quantize_q4_k(values, blocks);
  const std::vector<float> back = decoded(blocks);
  double error2 = 0, value2 = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    // A range of 2 over 15 levels, and the 6-bit grids of the scale and the min.
    EXPECT_LE(std::fabs(back[i] - values[i]), 2.0f / 15 + 2.0f / 63) << i;
    error2 += double(back[i] - values[i]) * (back[i] - values[i]);
    value2 += double(values[i]) * values[i];
  }
  EXPECT_LT(std::sqrt(error2 / value2), 0.08);
}

// Why a Q4_K file's decoded weights, quantised again (serve --quantize q4_k on an imported or
// in-place file), are nearly all the file's own blocks: the search finds the same fit.
TEST(Q4K, QuantisingDecodedValuesAgainGivesNearlyTheSameBlocks) {
  const int64_t n = 512;
  std::vector<uint8_t> first(n * kQ4KBlockBytes), again(first.size());
  quantize_q4_k(patterned(n * kQ4KBlockSize), first);
  quantize_q4_k(decoded(first), again);
  int64_t same = 0;
  for (int64_t b = 0; b < n; ++b) {
    same += std::memcmp(first.data() + b * kQ4KBlockBytes, again.data() + b * kQ4KBlockBytes,
                        kQ4KBlockBytes) == 0;
  }
  std::printf("%lld of %lld super-blocks came back\n", static_cast<long long>(same),
              static_cast<long long>(n));
  EXPECT_GE(same, n * 99 / 100);
}

TEST(Q4K, RefusesValuesThatAreNotWholeSuperBlocks) {
  const std::vector<float> values(300, 1.0f);
  std::vector<uint8_t> blocks(kQ4KBlockBytes);
  EXPECT_THROW(quantize_q4_k(values, blocks), Error);
}

}  // namespace
}  // namespace tessera
