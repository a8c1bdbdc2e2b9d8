#pragma once

#include <array>
#include <cstdint>

namespace tessera::serve {

inline constexpr int64_t kMaxTopLogprobs = 20;  // OpenAI's limit on top_logprobs

struct TokenLogprob {
  int32_t token = 0;
  double logprob = 0.0;  // natural log; -inf for a masked token
};

// The most likely tokens, most likely first (ties by lower id), held in place so that filling
// them never allocates.
class TopLogprobs {
 public:
  void clear() { size_ = 0; }
  // Throws an Error when all kMaxTopLogprobs places are taken.
  void push_back(const TokenLogprob& entry);

  const TokenLogprob* begin() const { return entries_.data(); }
  const TokenLogprob* end() const { return entries_.data() + size_; }
  int64_t size() const { return size_; }
  const TokenLogprob& operator[](int64_t i) const { return entries_[i]; }

 private:
  std::array<TokenLogprob, kMaxTopLogprobs> entries_{};
  int64_t size_ = 0;
};

struct TokenLogprobs {
  TokenLogprob chosen;
  TopLogprobs top;
};

// Fills out with the log-softmax of logits[chosen] and of the min(top_n, vocab_size) most likely
// tokens, from one row of raw logits, in two passes and without allocating. Logits may be -inf
// (masked) but not NaN or +inf, and not all -inf; top_n lies in [0, kMaxTopLogprobs].
void token_logprobs(const float* logits, int64_t vocab_size, int32_t chosen, int64_t top_n,
                    TokenLogprobs& out);

}  // namespace tessera::serve
