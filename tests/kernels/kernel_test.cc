#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "tessera/kernels/cpu/vec_math.h"
#include "tessera/kernels/ops.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;

TEST(Gemm, FloatMatchesDoubleForEveryTransposeCombination) {
  const int64_t M = 13, N = 17, K = 19;
  auto a = random_vector<double>(M * K, 1), b = random_vector<double>(K * N, 2),
       c0 = random_vector<double>(M * N, 3);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      std::vector<double> cd = c0;
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()), cf(c0.begin(), c0.end());
      int64_t lda = ta ? M : K, ldb = tb ? K : N;
      gemm<double>(kCpuContext, ta, tb, M, N, K, 0.5, a.data(), lda, b.data(), ldb, 2.0, cd.data(),
                   N);
      gemm<float>(kCpuContext, ta, tb, M, N, K, 0.5f, af.data(), lda, bf.data(), ldb, 2.0f,
                  cf.data(), N);
      // Reference by definition for the double path.
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          double ref = 2.0 * c0[i * N + j];
          for (int64_t k = 0; k < K; ++k) {
            ref += 0.5 * (ta ? a[k * M + i] : a[i * K + k]) * (tb ? b[j * K + k] : b[k * N + j]);
          }
          ASSERT_NEAR(cd[i * N + j], ref, 1e-12);
          ASSERT_NEAR(cf[i * N + j], ref, 1e-4);
        }
      }
    }
  }
}

TEST(VecMath, FastExpAndTanhAreAccurate) {
  for (float x = -80.0f; x < 80.0f; x += 0.37f) {
    EXPECT_NEAR(exp_fast(x) / std::exp(double(x)), 1.0, 3e-7) << x;
  }
  for (float x = -10.0f; x < 10.0f; x += 0.013f) {
    EXPECT_NEAR(tanh_fast(x), std::tanh(double(x)), 3e-7) << x;
  }
}

TEST(SoftmaxCrossEntropy, LossOfUniformLogitsIsLogV) {
  const int64_t V = 1000;
  std::vector<float> logits(V, 3.0f), losses(1);
  std::vector<int32_t> target = {7};
  softmax_cross_entropy<float>(kCpuContext, logits.data(), target.data(), losses.data(), 1, V,
                               0.0f);
  EXPECT_NEAR(losses[0], std::log(1000.0), 1e-5);
}

// A row whose target is ignored adds no loss and no gradient, whole or over a vocabulary shard;
// the other rows are as they would be alone.
TEST(SoftmaxCrossEntropy, IgnoredTargetsHaveNoLossAndNoGradient) {
  const int64_t V = 50, M = 3;
  std::vector<float> logits(M * V);
  for (int64_t i = 0; i < M * V; ++i) logits[i] = float(std::sin(0.37 * double(i)));
  const std::vector<int32_t> targets = {4, kIgnoredTarget, 9};
  std::vector<float> grad = logits, losses(M);
  softmax_cross_entropy<float>(kCpuContext, grad.data(), targets.data(), losses.data(), M, V, 0.5f);
  EXPECT_EQ(losses[1], 0.0f);
  for (int64_t v = 0; v < V; ++v) EXPECT_EQ(grad[V + v], 0.0f) << v;
  for (const int64_t m : {0, 2}) {
    std::vector<float> row(logits.begin() + m * V, logits.begin() + (m + 1) * V), loss(1);
    softmax_cross_entropy<float>(kCpuContext, row.data(), &targets[m], loss.data(), 1, V, 0.5f);
    EXPECT_EQ(losses[m], loss[0]);
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(grad[m * V + v], row[v]) << m << " " << v;
  }
  // A shard of the columns [10, 30), padded to 24.
  const int64_t first = 10, local = 20, ld = 24;
  std::vector<float> shard(M * ld, 1.0f), max(M), sums(M), target_logits(M);
  for (int64_t m = 0; m < M; ++m) {
    std::copy_n(logits.begin() + m * V + first, local, shard.begin() + m * ld);
  }
  vocab_shard_row_max<float>(kCpuContext, shard.data(), M, local, ld, max.data());
  vocab_shard_exp_sums<float>(kCpuContext, shard.data(), max.data(), targets.data(), first, M,
                              local, ld, sums.data(), target_logits.data(), true);
  vocab_shard_softmax_grad<float>(kCpuContext, shard.data(), targets.data(), first, sums.data(), M,
                                  local, ld, 0.5f);
  for (int64_t c = 0; c < ld; ++c) EXPECT_EQ(shard[ld + c], 0.0f) << c;
  EXPECT_NE(shard[0], 0.0f);
}

TEST(AdamW, MatchesTheClosedFormOfTwoSteps) {
  AdamWParams p{0.1, 0.9, 0.99, 1e-8, 0.5, 1};
  std::vector<double> param = {1.0}, grad = {0.5}, m = {0}, v = {0};
  adamw_update<double>(kCpuContext, param.data(), grad.data(), m.data(), v.data(), 1, p);
  // Step 1: mhat = g, vhat = g^2, update = g/|g| = 1.
  EXPECT_NEAR(param[0], 1.0 * (1 - 0.1 * 0.5) - 0.1 * 0.5 / (0.5 + 1e-8), 1e-12);
  double p1 = param[0];
  grad[0] = -0.25;
  p.step = 2;
  adamw_update<double>(kCpuContext, param.data(), grad.data(), m.data(), v.data(), 1, p);
  double m2 = 0.9 * 0.05 + 0.1 * -0.25, v2 = 0.99 * 0.0025 + 0.01 * 0.0625;
  double mhat = m2 / (1 - 0.81), vhat = v2 / (1 - 0.9801);
  EXPECT_NEAR(param[0], p1 * (1 - 0.05) - 0.1 * mhat / (std::sqrt(vhat) + 1e-8), 1e-12);
}

TEST(SumSquares, IsIndependentOfThreadCount) {
  auto x = random_vector<float>(100000, 5);
  double two = sum_squares<float>(kCpuContext, x.data(), x.size());
  int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  double one = sum_squares<float>(kCpuContext, x.data(), x.size());
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  double ref = 0;
  for (float f : x) ref += double(f) * f;
  EXPECT_NEAR(two / ref, 1.0, 1e-12);
}

}  // namespace
}  // namespace tessera::kernels
