#include "tessera/serve/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"

namespace tessera::serve {

void validate(const SamplerParams& params) {
  check(std::isfinite(params.temperature) && params.temperature >= 0.0,
        "--temperature {} must be a finite number >= 0", params.temperature);
  check(params.top_k >= 0, "--top-k {} must be >= 0 (0 turns it off)", params.top_k);
  check(params.top_p > 0.0 && params.top_p <= 1.0, "--top-p {} must lie in (0, 1]", params.top_p);
}

Sampler::Sampler(int64_t vocab_size, SamplerParams params)
    : vocab_size_(vocab_size), params_(params) {
  check(vocab_size >= 1, "sampler: vocab size {} must be at least 1", vocab_size);
  validate(params);
  order_.resize(vocab_size);
  weights_.resize(vocab_size);
}

int32_t Sampler::sample(const float* logits, int64_t position) {
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
