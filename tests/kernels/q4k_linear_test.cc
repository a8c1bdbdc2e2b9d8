#include "tessera/kernels/q4k_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/q4_k.h"
#include "tests/expect_error.h"
#include "tests/kernels/gradient_check.h"
#include "tests/kernels/quantized_linear_checks.h"

namespace tessera::kernels {
namespace q4k_test {

using testing::random_vector;

// A matrix as ggml's Q4_K blocks (row by row) and as the kernel holds them.
struct Quantized {
  std::vector<uint8_t> ggml, repacked;
  Q4KMatrix matrix;
};

Quantized quantize(const std::vector<float>& w, int64_t rows, int64_t cols) {
  Quantized out{std::vector<uint8_t>(rows * cols / kQ4KBlockSize * kQ4KBlockBytes),
                std::vector<uint8_t>(q4k_bytes(rows, cols)),
                {}};
  quantize_q4_k(w, out.ggml);
  quantize_q4k_rows(w.data(), rows, cols, out.repacked.data());
  out.matrix = {out.repacked.data(), rows, cols};
  return out;
}

Q4KBlockView block_of(const Quantized& q, int64_t r, int64_t s) {
  return {q.ggml.data() + (r * (q.matrix.cols / kQ4KBlockSize) + s) * kQ4KBlockBytes};
}

std::vector<float> dequantized(const Q4KMatrix& w) {
  std::vector<float> out(w.rows * w.cols);
  dequantize_q4k_rows(w, out.data());
  return out;
}

std::vector<float> forward(const std::vector<float>& x, const Q4KMatrix& w, const float* b,
                           int64_t M) {
  std::vector<float> y(M * w.rows), scratch(q4k_linear_scratch_size(w.cols, M));
  linear_forward_q4k(kCpuContext, x.data(), w, b, y.data(), M, scratch.data());
  return y;
}

TEST(QuantizeQ4KRows, TheRepackedMatrixHoldsTheGgmlBlocksValues) {
  const int64_t rows = 21, cols = 512;  // rows not a multiple of the group of 16
  const Quantized q = quantize(random_vector<float>(rows * cols, 3), rows, cols);
  const std::vector<float> values = dequantized(q.matrix);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t s = 0; s < cols / kQ4KBlockSize; ++s) {
      const Q4KBlockView block = block_of(q, r, s);
      const float d = f16_to_f32(block.d()), dmin = f16_to_f32(block.dmin());
      for (int64_t i = 0; i < kQ4KBlockSize; ++i) {
        uint8_t sc, m;
        block.scale_min(i / kQ4KSubBlockSize, sc, m);
        const float expected = d * float(sc) * float(block.level(i)) - dmin * float(m);
        ASSERT_EQ(values[r * cols + s * kQ4KBlockSize + i], expected) << r << ", " << i;
      }
    }
  }
}

TEST(QuantizeQ4KRows, EachValueIsNearItsSubBlocksGrid) {
  const int64_t rows = 16, cols = 256;
  std::vector<float> w = random_vector<float>(rows * cols, 5);
  for (int64_t c = 0; c < 32; ++c) w[3 * cols + c] *= 1e-3f;  // a quiet sub-block
  for (int64_t c = 64; c < 96; ++c) w[5 * cols + c] = 0.0f;   // an all-zero sub-block
  for (int64_t c = 0; c < 256; ++c) w[7 * cols + c] = std::fabs(w[7 * cols + c]);  // min > 0
  const Quantized q = quantize(w, rows, cols);
  const std::vector<float> values = dequantized(q.matrix);
  double error2 = 0, value2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float widest = 0;  // the block's widest sub-block range, which its 6-bit scales cover
    for (int64_t j = 0; j < kQ4KSubBlocks; ++j) {
      const auto sub = w.begin() + r * cols + j * 32;
      widest = std::max(widest, std::max(0.0f, *std::max_element(sub, sub + 32)) -
                                    std::min(0.0f, *std::min_element(sub, sub + 32)));
    }
    for (int64_t c = 0; c < cols; ++c) {
      const float err = std::fabs(w[r * cols + c] - values[r * cols + c]);
      // A step of 15 levels, and the scale's and min's steps on their 6-bit grids.
      EXPECT_LE(err, widest / 15 + widest / 63) << r << ", " << c;
      error2 += double(err) * err;
      value2 += double(w[r * cols + c]) * w[r * cols + c];
    }
  }
  EXPECT_LT(std::sqrt(error2 / value2), 0.1);
  for (int64_t c = 64; c < 96; ++c) EXPECT_NEAR(values[5 * cols + c], 0.0f, 1e-2f);
}

TEST(LinearForwardQ4K, AgreesWithTheDequantisedProductWithinTheActivationsRounding) {
  const int64_t M = 7, in = 512, out = 40;
  const std::vector<float> x = random_vector<float>(M * in, 11);
  const std::vector<float> b = random_vector<float>(out, 13);
  const Quantized q = quantize(random_vector<float>(out * in, 12, 0.1), out, in);
  const std::vector<float> values = dequantized(q.matrix);
  const std::vector<float> y = forward(x, q.matrix, b.data(), M);
  // Each activation moves by at most half of its super-block's step, max|x| / 254.
  testing::expect_near_dequantised_product(x, values, b, y, M, in, out, 0.02);
}

TEST(LinearForwardQ4K, SumsEachSuperBlockExactlyAndScalesItOnceInColumnOrder) {
  const int64_t in = 512, out = 3;
  const std::vector<float> x = random_vector<float>(in, 21);
  const Quantized q = quantize(random_vector<float>(out * in, 22), out, in);
  const std::vector<float> y = forward(x, q.matrix, nullptr, 1);
  for (int64_t n = 0; n < out; ++n) {
    float acc = 0;
    for (int64_t s = 0; s < in / kQ4KBlockSize; ++s) {
      const float* xs = x.data() + s * kQ4KBlockSize;
      float largest = 0;
      for (int64_t i = 0; i < kQ4KBlockSize; ++i) largest = std::max(largest, std::fabs(xs[i]));
      const float inverse = largest > 0 ? 127.0f / largest : 0.0f;
      const Q4KBlockView block = block_of(q, n, s);
      int32_t products = 0, mins = 0;
      for (int64_t i = 0; i < kQ4KBlockSize; ++i) {
        uint8_t sc, m;
        block.scale_min(i / kQ4KSubBlockSize, sc, m);
        const int xq = int(std::clamp(std::nearbyint(xs[i] * inverse), -127.0f, 127.0f));
        products += sc * xq * block.level(i);
        mins += m * xq;
      }
      const float x_scale = largest / 127.0f;
      acc = std::fma(float(products), f16_to_f32(block.d()) * x_scale, acc);
      acc = std::fma(-float(mins), f16_to_f32(block.dmin()) * x_scale, acc);
    }
    EXPECT_EQ(y[n], acc + 0.0f) << "row " << n;
  }
}

TEST(LinearForwardQ4K, ARowGetsTheSameBitsAloneAsInABatchAndOnAnyThreadCount) {
  const int64_t M = 37, in = 256, out = 50;
  const std::vector<float> x = random_vector<float>(M * in, 31);
  const Quantized q = quantize(random_vector<float>(out * in, 32), out, in);
  const std::vector<float> b = random_vector<float>(out, 33);
  testing::expect_rows_independent(x, M, in, out, [&](const std::vector<float>& rows, int64_t n) {
    return forward(rows, q.matrix, b.data(), n);
  });
}

TEST(LinearForwardQ4K, RefusesColumnsThatAreNotWholeSuperBlocks) {
  const std::vector<float> w(4 * 288, 1.0f);
  std::vector<uint8_t> out(1 << 14);
  testing::expect_error([&] { quantize_q4k_rows(w.data(), 4, 288, out.data()); },
                        {"super-blocks of 256 columns", "288 columns"});
}

}  // namespace q4k_test
}  // namespace tessera::kernels
