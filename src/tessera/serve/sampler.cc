#include "tessera/serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::serve {

namespace {

template <typename T>
void require(bool ok, const char* param, T value, const char* requirement) {
  if (!ok) throw ParamError(param, fmt::format("{} {} {}", param, value, requirement));
}

}  // namespace

void validate(const SamplerParams& params) {
  require(std::isfinite(params.temperature) && params.temperature >= 0.0, "temperature",
          params.temperature, "must be a finite number >= 0");
  require(params.top_k >= 0, "top_k", params.top_k, "must be >= 0 (0 turns it off)");
  require(params.top_p > 0.0 && params.top_p <= 1.0, "top_p", params.top_p, "must lie in (0, 1]");
  require(params.min_p >= 0.0 && params.min_p <= 1.0, "min_p", params.min_p,
          "must lie in [0, 1] (0 turns it off)");
  require(std::isfinite(params.repetition_penalty) && params.repetition_penalty > 0.0,
          "repetition_penalty", params.repetition_penalty,
          "must be a finite number > 0 (1 turns it off)");
  require(params.presence_penalty >= -2.0 && params.presence_penalty <= 2.0, "presence_penalty",
          params.presence_penalty, "must lie in [-2, 2]");
  require(params.frequency_penalty >= -2.0 && params.frequency_penalty <= 2.0, "frequency_penalty",
          params.frequency_penalty, "must lie in [-2, 2]");
}

Sampler::Sampler(int64_t vocab_size, SamplerParams params)
    : vocab_size_(vocab_size), params_(params) {
  check(vocab_size >= 1, "sampler: vocab size {} must be at least 1", vocab_size);
  validate(params);
  order_.resize(vocab_size);
  weights_.resize(vocab_size);
  if (penalises()) {
    penalised_.resize(vocab_size);
    counts_.resize(vocab_size);
    touched_.reserve(vocab_size);
  }
}

bool Sampler::penalises() const {
  return params_.repetition_penalty != 1.0 || params_.presence_penalty != 0.0 ||
         params_.frequency_penalty != 0.0;
}

const float* Sampler::penalise(const float* logits, std::span<const int32_t> history,
                               int64_t generated_from) {
  check(generated_from >= 0 && generated_from <= int64_t(history.size()),
        "sampler: generated tokens start at {}, outside the history of {} tokens", generated_from,
        history.size());
  if (!penalises()) return logits;
  for (const int32_t id : history) {
    check(id >= 0 && id < vocab_size_, "sampler: token {} in the history is outside [0, {})", id,
          vocab_size_);
  }
  for (size_t i = 0; i < history.size(); ++i) {
    const int32_t id = history[i];
    if (counts_[id] == 0) {
      counts_[id] = 1;
      touched_.push_back(id);
    }
    if (int64_t(i) >= generated_from) ++counts_[id];
  }
  std::copy(logits, logits + vocab_size_, penalised_.begin());
  const double repetition = params_.repetition_penalty;
  for (const int32_t id : touched_) {
    double x = penalised_[id];
    x = x > 0.0 ? x / repetition : x * repetition;
    const int32_t generated = counts_[id] - 1;
    if (generated > 0) x -= params_.presence_penalty + params_.frequency_penalty * generated;
    penalised_[id] = static_cast<float>(x);
    counts_[id] = 0;
  }
  touched_.clear();
  return penalised_.data();
}

int32_t Sampler::sample(const float* raw_logits, int64_t position, std::span<const int32_t> history,
                        int64_t generated_from) {
  const float* logits = penalise(raw_logits, history, generated_from);
  const int64_t n = vocab_size_;
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = logits[i];
    if (std::isnan(x) || x == INFINITY) fail("sampler: logit {} of token {} is invalid", x, i);
    if (x > logits[best]) best = i;
  }
  check(logits[best] != -INFINITY, "sampler: every logit is -inf, nothing can be sampled");
  const int64_t top_k = params_.top_k == 0 ? n : std::min(params_.top_k, n);
  if (params_.temperature == 0.0 || top_k == 1) return static_cast<int32_t>(best);

  // Ordering by logit (ties by id) rather than by weight keeps the order strict even where
  // exp underflows, so the kept set never depends on the sort's internals.
  auto more_likely = [logits](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const double max_logit = logits[best];
  const double temperature = params_.temperature;
  // Dividing (not multiplying by 1/T) keeps a denormal temperature from making 0 * inf = NaN.
  auto weight = [&](int64_t id) { return std::exp((logits[id] - max_logit) / temperature); };
  double mass = 0.0;
  int64_t kept = n;
  if (top_k == n && params_.top_p >= 1.0) {
    for (int64_t id = 0; id < n; ++id) mass += weights_[id] = weight(id);
  } else {
    std::iota(order_.begin(), order_.end(), 0);
    if (top_k < n) {
      std::nth_element(order_.begin(), order_.begin() + top_k, order_.end(), more_likely);
      kept = top_k;
    }
    std::fill(weights_.begin(), weights_.end(), 0.0);
    for (int64_t j = 0; j < kept; ++j) mass += weights_[order_[j]] = weight(order_[j]);
  }

  if (params_.top_p < 1.0) {
    // Sort lazily in growing chunks: the nucleus is usually far smaller than the vocabulary.
    const double target = params_.top_p * mass;
    double cumulative = 0.0;
    int64_t sorted = 0, chunk = 64, nucleus = 0;
    while (nucleus == 0) {
      const int64_t end = std::min(kept, sorted + chunk);
      auto first = order_.begin() + sorted;
      std::nth_element(first, order_.begin() + end - 1, order_.begin() + kept, more_likely);
      std::sort(first, order_.begin() + end, more_likely);
      for (int64_t j = sorted; j < end; ++j) {
        cumulative += weights_[order_[j]];
        if (cumulative >= target) {
          nucleus = j + 1;
          break;
        }
      }
      if (end == kept && nucleus == 0) nucleus = kept;  // rounding left the sum short
      sorted = end;
      chunk *= 4;
    }
    for (int64_t j = nucleus; j < kept; ++j) weights_[order_[j]] = 0.0;
    mass = cumulative;
  }

  if (params_.min_p > 0.0) {
    // The most likely token weighs exp(0) = 1 and survives top_k and top_p, so each weight is
    // already a probability relative to it.
    mass = 0.0;
    for (int64_t id = 0; id < n; ++id) {
      double& w = weights_[id];
      if (w < params_.min_p) w = 0.0;
      mass += w;
    }
  }

  // Walk in id order, dropped tokens weighing 0, so the draw does not depend on how the
  // selection above happened to permute order_.
  const double r = CounterRng(params_.seed, 2).uniform(static_cast<uint64_t>(position)) * mass;
  double cumulative = 0.0;
  int64_t last = best;
  for (int64_t id = 0; id < n; ++id) {
    const double w = weights_[id];
    if (w <= 0.0) continue;
    cumulative += w;
    last = id;
    if (r < cumulative) return static_cast<int32_t>(id);
  }
  return static_cast<int32_t>(last);  // r fell past the last bucket by rounding
}

}  // namespace tessera::serve
