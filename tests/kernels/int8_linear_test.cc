#include "tessera/kernels/int8_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;

struct Quantized {
  std::vector<int8_t> q;
  std::vector<float> scales;
  Int8Matrix matrix(int64_t rows, int64_t cols) const {
    return {q.data(), scales.data(), rows, cols};
  }
};

Quantized quantize(const std::vector<float>& w, int64_t rows, int64_t cols) {
  Quantized out{std::vector<int8_t>(rows * cols), std::vector<float>(rows)};
  quantize_int8_rows(w.data(), rows, cols, out.q.data(), out.scales.data());
  return out;
}

TEST(QuantizeInt8Rows, EachValueIsWithinHalfAStepOfItsRowScale) {
  const int64_t rows = 9, cols = 70;
  std::vector<float> w = random_vector<float>(rows * cols, 3);
  for (int64_t c = 0; c < cols; ++c) w[4 * cols + c] *= 1e-3f;  // a row of a different magnitude
  const Quantized qw = quantize(w, rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    float largest = 0;
    int largest_q = 0;
    for (int64_t c = 0; c < cols; ++c) {
      largest = std::max(largest, std::fabs(w[r * cols + c]));
      largest_q = std::max(largest_q, std::abs(int(qw.q[r * cols + c])));
    }
    const float s = qw.scales[r];
    EXPECT_FLOAT_EQ(s, largest / 127.0f) << "row " << r;
    EXPECT_EQ(largest_q, 127) << "row " << r;  // the largest magnitude maps to the end of range
    for (int64_t c = 0; c < cols; ++c) {
      const double error = std::fabs(double(w[r * cols + c]) - double(s) * qw.q[r * cols + c]);
      // Rounding to nearest leaves half a step; f32 arithmetic adds a few units of rounding.
      EXPECT_LE(error, 0.5 * s * (1 + 1e-5)) << "row " << r << " column " << c;
    }
  }
}

TEST(QuantizeInt8Rows, AZeroRowGetsAZeroScale) {
  const std::vector<float> w = {0, 0, 0, 1, -2, 0.5};
  const Quantized qw = quantize(w, 2, 3);
  EXPECT_EQ(qw.scales[0], 0.0f);
  EXPECT_EQ(qw.q[0], 0);
  EXPECT_EQ(qw.q[1], 0);
  EXPECT_EQ(qw.q[2], 0);
  EXPECT_EQ(qw.q[3], 64);  // 1 / (2 / 127) = 63.5 rounds to the even 64
  EXPECT_EQ(qw.q[4], -127);
  EXPECT_EQ(qw.q[5], 32);  // 31.75
}

// Every row count from decoding (one x row, the remainders of the four-row tiles) to prefill
// (the int8 GEMM), with row and column counts that are not multiples of the tiles: each output is
// the same expression of the same exact integer sum, bit for bit, and within the quantisation
// error of the f32 product.
TEST(LinearForwardInt8, IsTheScaledExactIntegerSumAndCloseToTheF32Product) {
  for (int64_t in : {45, 300}) {
    const int64_t out = 37;
    const std::vector<float> w = random_vector<float>(out * in, 1, 0.05);
    const std::vector<float> b = random_vector<float>(out, 2);
    const Quantized qw = quantize(w, out, in);
    const Int8Matrix matrix = qw.matrix(out, in);
    for (int64_t M : {1, 2, 3, 4, 5, 7, 31, 32, 33, 70}) {
      std::vector<float> scratch(int8_linear_scratch_size(in, M));
      for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
        SCOPED_TRACE(::testing::Message() << "in " << in << " M " << M << " bias " << !!bias);
        const std::vector<float> x = random_vector<float>(M * in, 4 + M);
        const Quantized qx = quantize(x, M, in);
        std::vector<float> y(M * out, -1.0f);
        linear_forward_int8(kCpuContext, x.data(), matrix, bias, y.data(), M, scratch.data());
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t j = 0; j < out; ++j) {
            int64_t sum = 0;
            double exact = bias != nullptr ? bias[j] : 0.0, x_size = 0, w_size = 0;
            for (int64_t k = 0; k < in; ++k) {
              sum += int64_t(qx.q[m * in + k]) * qw.q[j * in + k];
              exact += double(x[m * in + k]) * w[j * in + k];
              x_size += std::fabs(x[m * in + k]);
              w_size += std::fabs(qw.scales[j] * qw.q[j * in + k]);
            }
            const float want =
                std::fma(float(sum), qx.scales[m] * qw.scales[j], bias != nullptr ? bias[j] : 0.0f);
            ASSERT_EQ(y[m * out + j], want) << "row " << m << " column " << j;
            // Each weight moved by at most half its row's step, each activation by half its own.
            const double bound = 0.5 * qw.scales[j] * x_size + 0.5 * qx.scales[m] * w_size + 1e-5;
            ASSERT_NEAR(y[m * out + j], exact, bound) << "row " << m << " column " << j;
          }
        }
      }
    }
  }
}

TEST(LinearForwardInt8, NamesHowAPrefillMultiplies) {
  const std::string path = int8_prefill_path();
  EXPECT_TRUE(path.starts_with("oneDNN matmul (") || path == "portable (f32 sums + sgemm)") << path;
  if (__builtin_cpu_supports("avx512vnni")) EXPECT_TRUE(path.starts_with("oneDNN")) << path;
}

}  // namespace
}  // namespace tessera::kernels
