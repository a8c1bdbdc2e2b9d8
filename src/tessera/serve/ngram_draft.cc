#include "tessera/serve/ngram_draft.h"

#include <algorithm>

namespace tessera::serve {

void ngram_draft(std::span<const int32_t> tokens, int64_t max_tokens, std::vector<int32_t>& draft) {
  draft.clear();
  const int64_t size = int64_t(tokens.size());
  if (max_tokens <= 0) return;
  for (int64_t n = std::min(kNgramDraftMax, size - 1); n >= kNgramDraftMin; --n) {
    const std::span<const int32_t> suffix = tokens.last(size_t(n));
    // The latest occurrence that ends before the suffix itself does.
    for (int64_t at = size - n - 1; at >= 0; --at) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + at)) continue;
      // Past the end of the tokens the continuation repeats itself: what followed the match is
      // what the draft has proposed so far.
      const int64_t from = at + n;
      for (int64_t i = from; i < from + max_tokens; ++i) {
        draft.push_back(i < size ? tokens[i] : draft[i - size]);
      }
      return;
    }
  }
}

}  // namespace tessera::serve
