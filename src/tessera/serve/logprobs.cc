#include "tessera/serve/logprobs.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::serve {

void TopLogprobs::push_back(const TokenLogprob& entry) {
  check(size_ < kMaxTopLogprobs, "top logprobs: all {} places are taken", kMaxTopLogprobs);
  entries_[size_++] = entry;
}

void token_logprobs(const float* logits, int64_t vocab_size, int32_t chosen, int64_t top_n,
                    TokenLogprobs& out) {
  check(vocab_size >= 1, "logprobs: vocab size {} must be at least 1", vocab_size);
  check(chosen >= 0 && chosen < vocab_size, "logprobs: token {} is outside [0, {})", chosen,
        vocab_size);
  check(top_n >= 0 && top_n <= kMaxTopLogprobs, "top_logprobs {} must lie in [0, {}]", top_n,
        kMaxTopLogprobs);
  const int64_t n_top = std::min(top_n, vocab_size);

  // Pass 1: the maximum and the n_top largest logits, kept sorted by insertion. Ids arrive in
  // increasing order, so an equal logit never displaces an earlier id.
  std::array<TokenLogprob, kMaxTopLogprobs> best;
  int64_t n_best = 0;
  float max_logit = -INFINITY;
  for (int64_t id = 0; id < vocab_size; ++id) {
    const float x = logits[id];
    if (std::isnan(x) || x == INFINITY) fail("logprobs: logit {} of token {} is invalid", x, id);
    max_logit = std::max(max_logit, x);
    if (n_top == 0 || (n_best == n_top && x <= best[n_best - 1].logprob)) continue;
    int64_t slot = std::min(n_best, n_top - 1);
    while (slot > 0 && best[slot - 1].logprob < x) {
      best[slot] = best[slot - 1];
      --slot;
    }
    best[slot] = {static_cast<int32_t>(id), x};
    n_best = std::min(n_best + 1, n_top);
  }
  check(max_logit != -INFINITY, "logprobs: every logit is -inf");

  // Pass 2: log-sum-exp around the maximum, accumulated in double.
  double sum = 0.0;
  for (int64_t id = 0; id < vocab_size; ++id) sum += std::exp(double(logits[id]) - max_logit);
  const double log_normaliser = double(max_logit) + std::log(sum);

  out.chosen = {chosen, double(logits[chosen]) - log_normaliser};
  out.top.clear();
  for (int64_t i = 0; i < n_best; ++i) {
    out.top.push_back({best[i].token, best[i].logprob - log_normaliser});
  }
}

}  // namespace tessera::serve
