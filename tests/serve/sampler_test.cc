#include "tessera/serve/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::serve {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

std::vector<double> frequencies(Sampler& sampler, const std::vector<float>& logits, int draws) {
  std::vector<double> freq(logits.size(), 0.0);
  for (int i = 0; i < draws; ++i) freq[sampler.sample(logits.data(), i)] += 1.0 / draws;
  return freq;
}

std::vector<float> random_logits(int64_t n, uint64_t seed) {
  CounterRng rng(seed, 9);
  std::vector<float> logits(n);
  for (int64_t i = 0; i < n; ++i) logits[i] = static_cast<float>(3.0 * rng.normal(i));
  return logits;
}

int32_t argmax(const std::vector<float>& logits) {
  int32_t best = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  Sampler greedy(5, {.temperature = 0.0});
  std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (int64_t pos = 0; pos < 10; ++pos) EXPECT_EQ(greedy.sample(logits.data(), pos), 1);
  std::vector<float> masked = {-INFINITY, -INFINITY, -3.0f, -INFINITY, -4.0f};
  EXPECT_EQ(greedy.sample(masked.data(), 0), 2);
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  std::vector<float> logits = random_logits(1000, 1);
  for (double t : {0.5, 1.0, 5.0, 100.0}) {
    Sampler sampler(1000, {.temperature = t, .top_k = 1, .seed = 3});
    for (int64_t pos = 0; pos < 50; ++pos) {
      EXPECT_EQ(sampler.sample(logits.data(), pos), argmax(logits)) << t;
    }
  }
}

TEST(Sampler, TinyTopPIsGreedy) {
  std::vector<float> logits = random_logits(1000, 2);
  Sampler sampler(1000, {.temperature = 1.0, .top_p = 1e-9, .seed = 4});
  for (int64_t pos = 0; pos < 50; ++pos) {
    EXPECT_EQ(sampler.sample(logits.data(), pos), argmax(logits));
  }
}

TEST(Sampler, FrequenciesMatchSoftmax) {
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  std::vector<float> logits = logits_of(probs);
  Sampler sampler(3, {.temperature = 1.0, .seed = 11});
  std::vector<double> freq = frequencies(sampler, logits, 20000);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(freq[i], probs[i], 0.015) << i;
}

TEST(Sampler, TemperatureSharpensOrFlattens) {
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  std::vector<float> logits = logits_of(probs);
  // At T = 2 the probabilities go as sqrt(p).
  Sampler sampler(3, {.temperature = 2.0, .seed = 12});
  std::vector<double> freq = frequencies(sampler, logits, 20000);
  double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.2);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(freq[i], std::sqrt(probs[i]) / z, 0.015) << i;
}

TEST(Sampler, TopKAndTopPRenormalise) {
  const std::vector<double> probs = {0.15, 0.45, 0.1, 0.3};  // most likely: 1, 3, 0, 2
  std::vector<float> logits = logits_of(probs);
  Sampler top_k(4, {.temperature = 1.0, .top_k = 2, .seed = 13});
  std::vector<double> freq = frequencies(top_k, logits, 20000);
  EXPECT_NEAR(freq[1], 0.6, 0.015);
  EXPECT_NEAR(freq[3], 0.4, 0.015);
  EXPECT_EQ(freq[0] + freq[2], 0.0);

  // 0.45 < 0.7 <= 0.75: the nucleus is {1, 3}.
  Sampler top_p(4, {.temperature = 1.0, .top_p = 0.7, .seed = 14});
  freq = frequencies(top_p, logits, 20000);
  EXPECT_NEAR(freq[1], 0.6, 0.015);
  EXPECT_NEAR(freq[3], 0.4, 0.015);
  EXPECT_EQ(freq[0] + freq[2], 0.0);

  // top_p applies to the top_k distribution: {1, 3, 0} renormalised is (.5, .33, .17), so
  // 0.8 is reached by {1, 3}; over the full distribution it would need {1, 3, 0}.
  Sampler both(4, {.temperature = 1.0, .top_k = 3, .top_p = 0.8, .seed = 15});
  freq = frequencies(both, logits, 20000);
  EXPECT_NEAR(freq[1], 0.6, 0.015);
  EXPECT_NEAR(freq[3], 0.4, 0.015);
  EXPECT_EQ(freq[0] + freq[2], 0.0);
}

TEST(Sampler, LargeVocabularyNucleusNeedsSeveralChunks) {
  // 1000 equal logits: top_p = 0.5 keeps exactly ids 0..499 (ties broken by id), which forces
  // the chunked sort past its first chunks.
  std::vector<float> logits(1000, 0.25f);
  Sampler sampler(1000, {.temperature = 1.0, .top_p = 0.5, .seed = 16});
  int32_t max_id = 0;
  for (int64_t pos = 0; pos < 5000; ++pos) {
    max_id = std::max(max_id, sampler.sample(logits.data(), pos));
  }
  EXPECT_LT(max_id, 500);
  EXPECT_GT(max_id, 480);
}

TEST(Sampler, SameSeedAndPositionSameToken) {
  std::vector<float> logits = random_logits(500, 5);
  Sampler a(500, {.temperature = 1.5, .top_k = 50, .top_p = 0.9, .seed = 21});
  Sampler b(500, {.temperature = 1.5, .top_k = 50, .top_p = 0.9, .seed = 21});
  Sampler c(500, {.temperature = 1.5, .top_k = 50, .top_p = 0.9, .seed = 22});
  int differ = 0;
  for (int64_t pos = 0; pos < 200; ++pos) {
    int32_t token = a.sample(logits.data(), pos);
    EXPECT_EQ(token, b.sample(logits.data(), pos));
    EXPECT_EQ(token, a.sample(logits.data(), pos));
    differ += token != c.sample(logits.data(), pos);
  }
  EXPECT_GT(differ, 50);
}

std::string error_of(const SamplerParams& params) {
  try {
    validate(params);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Sampler, InvalidParamsNameTheFlag) {
  EXPECT_EQ(error_of({}), "");
  EXPECT_EQ(error_of({.temperature = 0.0, .top_k = 5, .top_p = 1.0}), "");
  EXPECT_EQ(error_of({.temperature = -0.5}).rfind("--temperature", 0), 0u);
  EXPECT_EQ(
      error_of({.temperature = std::numeric_limits<double>::quiet_NaN()}).rfind("--temperature", 0),
      0u);
  EXPECT_EQ(error_of({.top_k = -1}).rfind("--top-k", 0), 0u);
  EXPECT_EQ(error_of({.top_p = 0.0}).rfind("--top-p", 0), 0u);
  EXPECT_EQ(error_of({.top_p = 1.5}).rfind("--top-p", 0), 0u);
  EXPECT_THROW(Sampler(10, {.top_p = -1.0}), Error);
}

TEST(Sampler, RejectsInvalidLogits) {
  Sampler sampler(3, {});
  std::vector<float> nan = {0.0f, std::nanf(""), 1.0f};
  EXPECT_THROW(sampler.sample(nan.data(), 0), Error);
  std::vector<float> all_masked(3, -INFINITY);
  EXPECT_THROW(sampler.sample(all_masked.data(), 0), Error);
}

}  // namespace
}  // namespace tessera::serve
