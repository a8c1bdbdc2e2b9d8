// Checks shared by the quantised linear kernels' tests.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace tessera::testing {

// y[M, out] is within `share` of the magnitude of each dot product of x[M, in] and the
// dequantised weights values[out, in], plus b[out], from the activations' rounding.
inline void expect_near_dequantised_product(const std::vector<float>& x,
                                            const std::vector<float>& values,
                                            const std::vector<float>& b,
                                            const std::vector<float>& y, int64_t M, int64_t in,
                                            int64_t out, double share) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < out; ++n) {
      double exact = b[n], magnitude = 0;
      for (int64_t k = 0; k < in; ++k) {
        exact += double(x[m * in + k]) * values[n * in + k];
        magnitude += std::fabs(double(x[m * in + k]) * values[n * in + k]);
      }
      EXPECT_NEAR(y[m * out + n], exact, share * magnitude + 1e-5) << m << ", " << n;
    }
  }
}

// A row of x gets the same bits alone as in a batch, and on one thread as on all of them;
// forward(x, M) returns y[M, out] for x[M, in].
template <typename Forward>
void expect_rows_independent(const std::vector<float>& x, int64_t M, int64_t in, int64_t out,
                             Forward forward) {
  const std::vector<float> batch = forward(x, M);
  for (int64_t m = 0; m < M; ++m) {
    const std::vector<float> row(x.begin() + m * in, x.begin() + (m + 1) * in);
    const std::vector<float> alone = forward(row, 1);
    for (int64_t n = 0; n < out; ++n) ASSERT_EQ(alone[n], batch[m * out + n]) << m << ", " << n;
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one_thread = forward(x, M);
  omp_set_num_threads(threads);
  EXPECT_EQ(one_thread, batch);
}

}  // namespace tessera::testing
