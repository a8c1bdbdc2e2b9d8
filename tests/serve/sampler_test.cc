#include "tessera/serve/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
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
  for (int i = 0; i < draws; ++i) freq[sampler.sample(logits.data(), i, {}, 0)] += 1.0 / draws;
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
  for (int64_t pos = 0; pos < 10; ++pos) EXPECT_EQ(greedy.sample(logits.data(), pos, {}, 0), 1);
  std::vector<float> masked = {-INFINITY, -INFINITY, -3.0f, -INFINITY, -4.0f};
  EXPECT_EQ(greedy.sample(masked.data(), 0, {}, 0), 2);
}

TEST(Sampler, TopKOneIsGreedyAtAnyTemperature) {
  std::vector<float> logits = random_logits(1000, 1);
  for (double t : {0.5, 1.0, 5.0, 100.0}) {
    Sampler sampler(1000, {.temperature = t, .top_k = 1, .seed = 3});
    for (int64_t pos = 0; pos < 50; ++pos) {
      EXPECT_EQ(sampler.sample(logits.data(), pos, {}, 0), argmax(logits)) << t;
    }
  }
}

TEST(Sampler, TinyTopPIsGreedy) {
  std::vector<float> logits = random_logits(1000, 2);
  Sampler sampler(1000, {.temperature = 1.0, .top_p = 1e-9, .seed = 4});
  for (int64_t pos = 0; pos < 50; ++pos) {
    EXPECT_EQ(sampler.sample(logits.data(), pos, {}, 0), argmax(logits));
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
    max_id = std::max(max_id, sampler.sample(logits.data(), pos, {}, 0));
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
    int32_t token = a.sample(logits.data(), pos, {}, 0);
    EXPECT_EQ(token, b.sample(logits.data(), pos, {}, 0));
    EXPECT_EQ(token, a.sample(logits.data(), pos, {}, 0));
    differ += token != c.sample(logits.data(), pos, {}, 0);
  }
  EXPECT_GT(differ, 50);
}

TEST(Sampler, MinPKeepsTokensNearTheTopAfterTemperature) {
  const std::vector<double> probs = {0.5, 0.3, 0.16, 0.04};
  std::vector<float> logits = logits_of(probs);
  // Relative to 0.5, only 0.3 reaches 0.5: {0, 1} renormalised.
  Sampler sampler(4, {.temperature = 1.0, .min_p = 0.5, .seed = 17});
  std::vector<double> freq = frequencies(sampler, logits, 20000);
  EXPECT_NEAR(freq[0], 0.625, 0.015);
  EXPECT_NEAR(freq[1], 0.375, 0.015);
  EXPECT_EQ(freq[2] + freq[3], 0.0);

  // At T = 2 the probabilities go as sqrt(p): sqrt(0.16 / 0.5) = 0.57 now passes, sqrt(0.08)
  // does not.
  Sampler hot(4, {.temperature = 2.0, .min_p = 0.5, .seed = 18});
  freq = frequencies(hot, logits, 20000);
  const double z = std::sqrt(0.5) + std::sqrt(0.3) + std::sqrt(0.16);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(freq[i], std::sqrt(probs[i]) / z, 0.015) << i;
  EXPECT_EQ(freq[3], 0.0);

  // min_p applies after top_k: the top token is the same, so the cut is too.
  Sampler both(4, {.temperature = 1.0, .top_k = 3, .min_p = 0.5, .seed = 19});
  freq = frequencies(both, logits, 20000);
  EXPECT_NEAR(freq[0], 0.625, 0.015);
  EXPECT_EQ(freq[2] + freq[3], 0.0);
}

TEST(Sampler, RepetitionPenaltyCoversPromptAndGeneratedTokens) {
  const std::vector<int32_t> prompt = {0, 0, 3};
  // Positive logits are divided: 2.0 / 2 = 1.0 < 1.5. Applied once however often 0 occurs.
  std::vector<float> positive = {2.0f, 1.5f, -1.0f, 0.0f};
  Sampler greedy(4, {.temperature = 0.0, .repetition_penalty = 2.0});
  EXPECT_EQ(greedy.sample(positive.data(), 3, prompt, 3), 1);
  Sampler mild(4, {.temperature = 0.0, .repetition_penalty = 1.2});
  EXPECT_EQ(mild.sample(positive.data(), 3, prompt, 3), 0);
  // Negative logits are multiplied: -1 * 2 = -2 < -1.5.
  std::vector<float> negative = {-1.0f, -1.5f, -4.0f, -3.0f};
  EXPECT_EQ(greedy.sample(negative.data(), 3, prompt, 3), 1);
  // Generated tokens count as well.
  const std::vector<int32_t> generated = {3, 0};
  EXPECT_EQ(greedy.sample(positive.data(), 2, generated, 1), 1);
  // The penalty below 1 rewards repeats.
  std::vector<float> close = {1.0f, 1.2f, -1.0f, 0.0f};
  Sampler reward(4, {.temperature = 0.0, .repetition_penalty = 0.5});
  EXPECT_EQ(reward.sample(close.data(), 3, prompt, 3), 0);
}

TEST(Sampler, PresenceAndFrequencyPenaltiesCoverOnlyGeneratedTokens) {
  std::vector<float> logits = {0.0f, 2.0f, 3.0f};
  const std::vector<int32_t> history = {1, 2, 2};  // the prompt is {1}
  auto greedy = [&](SamplerParams params, int64_t generated_from) {
    params.temperature = 0.0;
    return Sampler(3, params).sample(logits.data(), 3, history, generated_from);
  };
  // Presence counts once, and not for the prompt's 1: 3 - 0.6 > 2, 3 - 1.1 < 2.
  EXPECT_EQ(greedy({.presence_penalty = 0.6}, 1), 2);
  EXPECT_EQ(greedy({.presence_penalty = 1.1}, 1), 1);
  // Frequency counts each time: 3 - 2 * 0.6 < 2, 3 - 2 * 0.4 > 2.
  EXPECT_EQ(greedy({.frequency_penalty = 0.6}, 1), 1);
  EXPECT_EQ(greedy({.frequency_penalty = 0.4}, 1), 2);
  // With no token generated yet, nothing is penalised.
  EXPECT_EQ(greedy({.presence_penalty = 2.0, .frequency_penalty = 2.0}, 3), 2);
}

TEST(Sampler, PenalisedFrequenciesMatchSoftmaxOfPenalisedLogits) {
  const std::vector<double> probs = {0.5, 0.3, 0.2};
  std::vector<float> logits = logits_of(probs);
  const std::vector<int32_t> history = {2, 0, 0, 1};  // prompt {2}, generated {0, 0, 1}
  const SamplerParams params = {.temperature = 1.0,
                                .repetition_penalty = 1.5,
                                .presence_penalty = 0.3,
                                .frequency_penalty = -0.1,
                                .seed = 20};
  // Every logit is negative, so the repetition penalty multiplies each by 1.5.
  const std::vector<double> penalised = {std::log(0.5) * 1.5 - 0.3 + 0.1 * 2,
                                         std::log(0.3) * 1.5 - 0.3 + 0.1 * 1, std::log(0.2) * 1.5};
  double z = 0.0;
  for (double x : penalised) z += std::exp(x);
  Sampler sampler(3, params);
  std::vector<double> freq(3, 0.0);
  for (int i = 0; i < 20000; ++i) freq[sampler.sample(logits.data(), i, history, 1)] += 1.0 / 20000;
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(freq[i], std::exp(penalised[i]) / z, 0.015) << i;
}

TEST(Sampler, PenaltiesDoNotCarryOverBetweenCalls) {
  std::vector<float> logits = {2.0f, 1.5f, 0.0f};
  Sampler sampler(3, {.temperature = 0.0, .repetition_penalty = 2.0, .presence_penalty = 1.0});
  const std::vector<int32_t> history = {0, 0};
  EXPECT_EQ(sampler.sample(logits.data(), 2, history, 1), 1);
  EXPECT_EQ(sampler.sample(logits.data(), 0, {}, 0), 0);
  EXPECT_EQ(logits[0], 2.0f);  // the caller's logits are untouched
}

TEST(Sampler, RejectsAHistoryOutsideTheVocabulary) {
  std::vector<float> logits = {0.0f, 1.0f, 2.0f};
  Sampler sampler(3, {.repetition_penalty = 1.3});
  const std::vector<int32_t> bad = {1, 3};
  EXPECT_THROW(sampler.sample(logits.data(), 2, bad, 2), Error);
  const std::vector<int32_t> good = {1, 2};
  EXPECT_THROW(sampler.sample(logits.data(), 2, good, 3), Error);
  EXPECT_THROW(sampler.sample(logits.data(), 2, good, -1), Error);
  // A failed call leaves no counts behind.
  Sampler greedy(3, {.temperature = 0.0, .presence_penalty = 2.0});
  const std::vector<int32_t> partly_bad = {2, 2, 7};
  EXPECT_THROW(greedy.sample(logits.data(), 3, partly_bad, 0), Error);
  EXPECT_EQ(greedy.sample(logits.data(), 0, {}, 0), 2);
}

// The message and param() of validate's error, or empty strings when params are valid.
std::pair<std::string, std::string> error_of(const SamplerParams& params) {
  try {
    validate(params);
  } catch (const ParamError& e) {
    return {e.param(), e.what()};
  }
  return {"", ""};
}

TEST(Sampler, InvalidParamsNameTheParameter) {
  EXPECT_EQ(error_of({}).first, "");
  EXPECT_EQ(error_of({.temperature = 0.0,
                      .top_k = 5,
                      .top_p = 1.0,
                      .min_p = 1.0,
                      .repetition_penalty = 0.5,
                      .presence_penalty = -2.0,
                      .frequency_penalty = 2.0})
                .first,
            "");
  EXPECT_EQ(error_of({.temperature = -1.0}).second, "temperature -1 must be a finite number >= 0");
  EXPECT_EQ(error_of({.top_p = 1.5}).second, "top_p 1.5 must lie in (0, 1]");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<std::string, SamplerParams>> bad = {
      {"temperature", {.temperature = nan}},
      {"temperature", {.temperature = INFINITY}},
      {"top_k", {.top_k = -1}},
      {"top_p", {.top_p = 0.0}},
      {"top_p", {.top_p = nan}},
      {"min_p", {.min_p = -0.1}},
      {"min_p", {.min_p = 1.1}},
      {"min_p", {.min_p = nan}},
      {"repetition_penalty", {.repetition_penalty = 0.0}},
      {"repetition_penalty", {.repetition_penalty = INFINITY}},
      {"presence_penalty", {.presence_penalty = 2.5}},
      {"presence_penalty", {.presence_penalty = nan}},
      {"frequency_penalty", {.frequency_penalty = -2.5}},
  };
  for (const auto& [param, params] : bad) {
    const auto [named, message] = error_of(params);
    EXPECT_EQ(named, param) << message;
    EXPECT_EQ(message.rfind(param + " ", 0), 0u) << message;
  }
  EXPECT_THROW(Sampler(10, {.top_p = -1.0}), ParamError);
}

TEST(Sampler, RejectsInvalidLogits) {
  Sampler sampler(3, {});
  std::vector<float> nan = {0.0f, std::nanf(""), 1.0f};
  EXPECT_THROW(sampler.sample(nan.data(), 0, {}, 0), Error);
  std::vector<float> all_masked(3, -INFINITY);
  EXPECT_THROW(sampler.sample(all_masked.data(), 0, {}, 0), Error);
}

}  // namespace
}  // namespace tessera::serve
