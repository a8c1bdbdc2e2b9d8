#include "tessera/kernels/q4_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/dtype.h"
#include "tests/expect_error.h"
#include "tests/kernels/gradient_check.h"
#include "tests/kernels/quantized_linear_checks.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;

struct Quantized {
  std::vector<uint8_t> nibbles;
  std::vector<uint16_t> scales;
  Q4Matrix matrix;
};

Quantized quantize(const std::vector<float>& w, int64_t rows, int64_t cols) {
  Quantized out{std::vector<uint8_t>(q4_nibble_bytes(rows, cols)),
                std::vector<uint16_t>(q4_scale_count(rows, cols)),
                {}};
  quantize_q4_rows(w.data(), rows, cols, out.nibbles.data(), out.scales.data());
  out.matrix = {out.nibbles.data(), out.scales.data(), rows, cols};
  return out;
}

std::vector<float> dequantized(const Q4Matrix& w) {
  std::vector<float> out(w.rows * w.cols);
  dequantize_q4_rows(w, out.data());
  return out;
}

std::vector<float> forward(const std::vector<float>& x, const Q4Matrix& w, const float* b,
                           int64_t M) {
  std::vector<float> y(M * w.rows), scratch(q4_linear_scratch_size(w.cols, M));
  linear_forward_q4(kCpuContext, x.data(), w, b, y.data(), M, scratch.data());
  return y;
}

TEST(QuantizeQ4Rows, RoundsAsGgmlQ4_0WithTheLargestMagnitudeAtMinusEight) {
  // One block of -16 ... 15: d = -16 / -8 = 2, q = min(15, trunc(x / 2 + 8.5)).
  std::vector<float> w(32);
  for (int j = 0; j < 32; ++j) w[j] = float(j - 16);
  const Quantized q = quantize(w, 1, 32);
  EXPECT_EQ(f16_to_f32(q.scales[0]), 2.0f);
  const std::vector<float> values = dequantized(q.matrix);
  for (int j = 0; j < 32; ++j) {
    const int level = std::min(15, int(float(j - 16) / 2.0f + 8.5f));
    EXPECT_EQ(values[j], 2.0f * float(level - 8)) << "column " << j;
  }
}

TEST(QuantizeQ4Rows, EachValueIsWithinHalfAStepOfItsBlockScale) {
  const int64_t rows = 37, cols = 96;  // rows not a multiple of the group of 16
  std::vector<float> w = random_vector<float>(rows * cols, 5);
  for (int64_t c = 0; c < 32; ++c) w[3 * cols + c] *= 1e-4f;  // a block of a different magnitude
  for (int64_t c = 32; c < 64; ++c) w[5 * cols + c] = 0.0f;   // an all-zero block
  const Quantized q = quantize(w, rows, cols);
  const std::vector<float> values = dequantized(q.matrix);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      float largest = 0;
      for (int64_t j = 0; j < 32; ++j)
        largest = std::max(largest, std::fabs(w[r * cols + 32 * b + j]));
      const float step = largest / 8;  // d before its rounding to f16
      for (int64_t j = 0; j < 32; ++j) {
        const int64_t at = r * cols + 32 * b + j;
        // Half a step from rounding, a little more where the clamp at q = 15 cuts the top step,
        // and the f16 rounding of d over up to 8 steps.
        EXPECT_LE(std::fabs(w[at] - values[at]), step * (1.0f + 8.0f / 1024)) << r << ", " << at;
      }
    }
  }
  for (int64_t c = 32; c < 64; ++c) EXPECT_EQ(values[5 * cols + c], 0.0f);
}

// What makes a Q4_0 file's weights, decoded to f32, come back as the very blocks of the file.
TEST(QuantizeQ4Rows, QuantisingDecodedValuesAgainGivesTheSameBlocks) {
  const int64_t rows = 20, cols = 64;
  const Quantized first = quantize(random_vector<float>(rows * cols, 9), rows, cols);
  const Quantized again = quantize(dequantized(first.matrix), rows, cols);
  EXPECT_EQ(again.nibbles, first.nibbles);
  EXPECT_EQ(again.scales, first.scales);
}

TEST(LinearForwardQ4, AgreesWithTheDequantisedProductWithinTheActivationsRounding) {
  const int64_t M = 7, in = 128, out = 40;
  const std::vector<float> x = random_vector<float>(M * in, 11);
  const std::vector<float> w = random_vector<float>(out * in, 12, 0.1);
  const std::vector<float> b = random_vector<float>(out, 13);
  const Quantized q = quantize(w, out, in);
  const std::vector<float> values = dequantized(q.matrix);
  const std::vector<float> y = forward(x, q.matrix, b.data(), M);
  // Each activation moves by at most half of its block's step, max|x| / 254.
  testing::expect_near_dequantised_product(x, values, b, y, M, in, out, 0.01);
}

TEST(LinearForwardQ4, SumsEachBlockExactlyAndScalesItOnceInColumnOrder) {
  const int64_t in = 64, out = 3;
  const std::vector<float> x = random_vector<float>(in, 21);
  const std::vector<float> w = random_vector<float>(out * in, 22);
  const Quantized q = quantize(w, out, in);
  const std::vector<float> values = dequantized(q.matrix);
  const std::vector<float> y = forward(x, q.matrix, nullptr, 1);
  for (int64_t n = 0; n < out; ++n) {
    float acc = 0;
    for (int64_t b = 0; b < in / 32; ++b) {
      float largest = 0;
      for (int64_t j = 0; j < 32; ++j) largest = std::max(largest, std::fabs(x[32 * b + j]));
      const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
      const float w_scale = f16_to_f32(q.scales[b * 16 + n]);
      int32_t sum = 0;
      for (int64_t j = 0; j < 32; ++j) {
        const int xq = int(std::clamp(std::nearbyint(x[32 * b + j] * inverse), -127.0f, 127.0f));
        const int wq = w_scale != 0 ? int(std::lround(values[n * in + 32 * b + j] / w_scale)) : 0;
        sum += xq * wq;
      }
      acc = std::fma(float(sum), w_scale * (largest / 127.0f), acc);
    }
    EXPECT_EQ(y[n], acc + 0.0f) << "row " << n;
  }
}

TEST(LinearForwardQ4, ARowGetsTheSameBitsAloneAsInABatchAndOnAnyThreadCount) {
  const int64_t M = 37, in = 96, out = 50;
  const std::vector<float> x = random_vector<float>(M * in, 31);
  const Quantized q = quantize(random_vector<float>(out * in, 32), out, in);
  const std::vector<float> b = random_vector<float>(out, 33);
  testing::expect_rows_independent(x, M, in, out, [&](const std::vector<float>& rows, int64_t n) {
    return forward(rows, q.matrix, b.data(), n);
  });
}

TEST(LinearForwardQ4, RefusesColumnsThatAreNotWholeBlocks) {
  const std::vector<float> w(4 * 40, 1.0f);
  std::vector<uint8_t> nibbles(1 << 12);
  std::vector<uint16_t> scales(1 << 8);
  testing::expect_error([&] { quantize_q4_rows(w.data(), 4, 40, nibbles.data(), scales.data()); },
                        {"blocks of 32 columns", "40 columns"});
}

}  // namespace
}  // namespace tessera::kernels
