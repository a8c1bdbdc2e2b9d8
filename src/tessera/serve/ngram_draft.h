// Prompt-lookup drafting for speculative decoding: the tokens that followed the latest earlier
// occurrence of a sequence's last few tokens, proposed as its next ones. Text that repeats its
// prompt (code edits, quotes, extraction, summaries) drafts well; nothing is trained or loaded.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::serve {

// The longest suffix looked up first, down to the shortest.
inline constexpr int64_t kNgramDraftMax = 3, kNgramDraftMin = 1;

// Clears `draft` and fills it with the max_tokens tokens that followed the latest earlier
// occurrence of tokens' last n tokens, for the largest n in [kNgramDraftMin, kNgramDraftMax]
// that occurs earlier, continued periodically where they run into the end (a loop drafts its
// next turns); leaves it empty when no n occurs earlier.
void ngram_draft(std::span<const int32_t> tokens, int64_t max_tokens, std::vector<int32_t>& draft);

}  // namespace tessera::serve
