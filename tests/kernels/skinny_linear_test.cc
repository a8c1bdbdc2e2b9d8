// Linear layers over few rows (decoding) take a path of their own in f32, bf16 and f16: each must
// agree with the double-precision product of the values it multiplies, at every row count up to
// and past the switch to the general matmul, with tile remainders in rows and columns, and give a
// row the same bits whatever the other rows multiplied with it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;

// Checks y[M, out] against x[M, in] * w[out, in]^T + b in double, within the classic bound on an
// f32 sum of in products (plus one rounding for the bias).
void expect_product(const std::vector<float>& y, const std::vector<float>& x,
                    const std::vector<float>& w, const float* b, int64_t M, int64_t in,
                    int64_t out) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t j = 0; j < out; ++j) {
      double want = b != nullptr ? b[j] : 0.0, magnitude = std::fabs(want);
      for (int64_t k = 0; k < in; ++k) {
        const double term = double(x[m * in + k]) * w[j * in + k];
        want += term;
        magnitude += std::fabs(term);
      }
      ASSERT_NEAR(y[m * out + j], want, double(in + 2) * 0x1p-24 * magnitude)
          << "row " << m << " column " << j;
    }
  }
}

TEST(FewRowLinear, F32MatchesTheProductInDouble) {
  const int64_t out = 37;
  for (int64_t in : {45, 300}) {
    const std::vector<float> w = random_vector<float>(out * in, 1, 0.1);
    const std::vector<float> b = random_vector<float>(out, 2);
    for (int64_t M : {1, 2, 3, 4, 5, 15, 16, 17}) {
      SCOPED_TRACE(::testing::Message() << "in " << in << " M " << M);
      const std::vector<float> x = random_vector<float>(M * in, 3 + M);
      std::vector<float> y(M * out);
      linear_forward<float>(kCpuContext, x.data(), w.data(), b.data(), y.data(), M, in, out);
      expect_product(y, x, w, b.data(), M, in, out);
      linear_forward<float>(kCpuContext, x.data(), w.data(), nullptr, y.data(), M, in, out);
      expect_product(y, x, w, nullptr, M, in, out);
    }
  }
}

TEST(FewRowLinear, LowPrecisionMatchesTheProductOfTheRoundedValuesInDouble) {
  const int64_t out = 37;
  for (LowPrecision p : {LowPrecision::kBf16, LowPrecision::kF16}) {
    for (int64_t in : {45, 300}) {
      std::vector<uint16_t> w(out * in);
      cast_to_low(kCpuContext, random_vector<float>(out * in, 1, 0.1).data(), w.data(), out * in,
                  p);
      std::vector<float> wr(out * in);
      cast_from_low(kCpuContext, w.data(), wr.data(), out * in, p);
      const std::vector<float> b = random_vector<float>(out, 2);
      for (int64_t M : {1, 2, 3, 5, 31, 32}) {
        SCOPED_TRACE(::testing::Message()
                     << (p == LowPrecision::kBf16 ? "bf16" : "f16") << " in " << in << " M " << M);
        std::vector<uint16_t> x(M * in);
        cast_to_low(kCpuContext, random_vector<float>(M * in, 3 + M).data(), x.data(), M * in, p);
        std::vector<float> xr(M * in), y(M * out);
        cast_from_low(kCpuContext, x.data(), xr.data(), M * in, p);
        linear_forward_low(kCpuContext, x.data(), w.data(), b.data(), y.data(), M, in, out, p);
        expect_product(y, xr, wr, b.data(), M, in, out);
      }
    }
  }
}

// A decoded sequence's logits must not depend on what else is in the batch: a row of x multiplied
// alone (the single-row tiles) gives bit for bit what it gives among others (the four-row tiles).
TEST(FewRowLinear, EachRowGivesTheSameBitsAloneAsInABatch) {
  const int64_t out = 37, in = 300, M = 7;
  const std::vector<float> w = random_vector<float>(out * in, 1, 0.1);
  const std::vector<float> b = random_vector<float>(out, 2);
  const std::vector<float> x = random_vector<float>(M * in, 3);
  std::vector<float> batch(M * out), alone(out);
  linear_forward<float>(kCpuContext, x.data(), w.data(), b.data(), batch.data(), M, in, out);
  for (int64_t m = 0; m < M; ++m) {
    linear_forward<float>(kCpuContext, x.data() + m * in, w.data(), b.data(), alone.data(), 1, in,
                          out);
    for (int64_t j = 0; j < out; ++j) {
      ASSERT_EQ(alone[j], batch[m * out + j]) << "f32, row " << m << " column " << j;
    }
  }
  for (LowPrecision p : {LowPrecision::kBf16, LowPrecision::kF16}) {
    std::vector<uint16_t> w_low(out * in), x_low(M * in);
    cast_to_low(kCpuContext, w.data(), w_low.data(), out * in, p);
    cast_to_low(kCpuContext, x.data(), x_low.data(), M * in, p);
    linear_forward_low(kCpuContext, x_low.data(), w_low.data(), b.data(), batch.data(), M, in, out,
                       p);
    for (int64_t m = 0; m < M; ++m) {
      linear_forward_low(kCpuContext, x_low.data() + m * in, w_low.data(), b.data(), alone.data(),
                         1, in, out, p);
      for (int64_t j = 0; j < out; ++j) {
        ASSERT_EQ(alone[j], batch[m * out + j])
            << (p == LowPrecision::kBf16 ? "bf16" : "f16") << ", row " << m << " column " << j;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
