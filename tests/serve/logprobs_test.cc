#include "tessera/serve/logprobs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::serve {
namespace {

// log softmax in double, straight from the definition.
std::vector<double> reference_logprobs(const std::vector<float>& logits) {
  double max = -INFINITY;
  for (float x : logits) max = std::max(max, double(x));
  double sum = 0.0;
  for (float x : logits) sum += std::exp(double(x) - max);
  std::vector<double> out;
  for (float x : logits) out.push_back(double(x) - max - std::log(sum));
  return out;
}

TEST(Logprobs, MatchADirectComputationInOrder) {
  const int64_t n = 5000;
  CounterRng rng(7, 1);
  std::vector<float> logits(n);
  for (int64_t i = 0; i < n; ++i) logits[i] = static_cast<float>(4.0 * rng.normal(i));
  const std::vector<double> expected = reference_logprobs(logits);
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return expected[a] > expected[b]; });

  TokenLogprobs out;
  token_logprobs(logits.data(), n, 123, kMaxTopLogprobs, out);
  EXPECT_EQ(out.chosen.token, 123);
  EXPECT_NEAR(out.chosen.logprob, expected[123], 1e-9);
  ASSERT_EQ(out.top.size(), kMaxTopLogprobs);
  for (int64_t i = 0; i < kMaxTopLogprobs; ++i) {
    EXPECT_EQ(out.top[i].token, order[i]) << i;
    EXPECT_NEAR(out.top[i].logprob, expected[order[i]], 1e-9) << i;
  }

  // Filling the same struct again with fewer alternatives replaces them all.
  token_logprobs(logits.data(), n, order[0], 3, out);
  EXPECT_EQ(out.top.size(), 3);
  EXPECT_EQ(out.chosen.logprob, out.top[0].logprob);
  token_logprobs(logits.data(), n, 0, 0, out);
  EXPECT_EQ(out.top.size(), 0);
  EXPECT_EQ(out.top.begin(), out.top.end());
}

TEST(Logprobs, TiesGoToTheLowerIdAndMaskedTokensAreMinusInfinity) {
  const std::vector<float> logits = {1.0f, 3.0f, -INFINITY, 3.0f, 1.0f, 2.0f};
  TokenLogprobs out;
  token_logprobs(logits.data(), 6, 2, 5, out);
  EXPECT_EQ(out.chosen.logprob, -INFINITY);
  std::vector<int32_t> ids;
  for (const TokenLogprob& entry : out.top) ids.push_back(entry.token);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 5, 0, 4}));
  EXPECT_EQ(out.top[0].logprob, out.top[1].logprob);

  // Asking for more alternatives than the vocabulary has gives all of it.
  token_logprobs(logits.data(), 6, 0, kMaxTopLogprobs, out);
  ASSERT_EQ(out.top.size(), 6);
  EXPECT_EQ(out.top[5].token, 2);
  EXPECT_EQ(out.top[5].logprob, -INFINITY);
}

TEST(Logprobs, StableForHugeLogits) {
  // exp(1000) overflows; with the maximum subtracted first nothing does.
  const std::vector<float> logits = {1000.0f, 999.0f, -1000.0f};
  TokenLogprobs out;
  token_logprobs(logits.data(), 3, 1, 2, out);
  const double log_z = 1000.0 + std::log(1.0 + std::exp(-1.0) + std::exp(-2000.0));
  EXPECT_NEAR(out.chosen.logprob, 999.0 - log_z, 1e-12);
  EXPECT_NEAR(out.top[0].logprob, 1000.0 - log_z, 1e-12);
  double mass = 0.0;
  for (const TokenLogprob& entry : out.top) mass += std::exp(entry.logprob);
  EXPECT_NEAR(mass, 1.0, 1e-12);
}

TEST(Logprobs, RejectsBadInput) {
  const std::vector<float> logits = {0.0f, 1.0f};
  TokenLogprobs out;
  EXPECT_THROW(token_logprobs(logits.data(), 2, 2, 1, out), Error);
  EXPECT_THROW(token_logprobs(logits.data(), 2, -1, 1, out), Error);
  EXPECT_THROW(token_logprobs(logits.data(), 2, 0, kMaxTopLogprobs + 1, out), Error);
  EXPECT_THROW(token_logprobs(logits.data(), 2, 0, -1, out), Error);
  const std::vector<float> nan = {0.0f, std::nanf("")};
  EXPECT_THROW(token_logprobs(nan.data(), 2, 0, 1, out), Error);
  const std::vector<float> masked(2, -INFINITY);
  EXPECT_THROW(token_logprobs(masked.data(), 2, 0, 1, out), Error);
}

}  // namespace
}  // namespace tessera::serve
