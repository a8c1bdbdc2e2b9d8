#include "tessera/serve/ngram_draft.h"

#include <gtest/gtest.h>

#include <vector>

namespace tessera::serve {
namespace {

std::vector<int32_t> draft_of(const std::vector<int32_t>& tokens, int64_t most) {
  std::vector<int32_t> draft = {99};  // cleared first
  ngram_draft(tokens, most, draft);
  return draft;
}

TEST(NgramDraft, ProposesWhatFollowedTheLatestEarlierMatchOfTheLongestSuffix) {
  // The suffix 1 2 3 occurs at 0 (followed by 4 5) and its 2 3 also at 6 (followed by 9):
  // the longest match wins, and of equally long ones the latest.
  EXPECT_EQ(draft_of({1, 2, 3, 4, 5, 6, 2, 3, 9, 1, 2, 3}, 2), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(draft_of({1, 2, 3, 7, 1, 2, 3, 8, 1, 2, 3}, 3), (std::vector<int32_t>{8, 1, 2}));
  // Only 1-token suffixes match: the latest earlier 5, whose continuation runs into the end and
  // goes on as the loop it is.
  EXPECT_EQ(draft_of({5, 6, 5, 7, 5}, 4), (std::vector<int32_t>{7, 5, 7, 5}));
  EXPECT_EQ(draft_of({4, 4, 4, 4}, 5), (std::vector<int32_t>{4, 4, 4, 4, 4}));
  EXPECT_EQ(draft_of({1, 2, 3, 4, 1, 2}, 1), (std::vector<int32_t>{3}));
}

TEST(NgramDraft, ProposesNothingWithoutAMatchOrRoom) {
  EXPECT_TRUE(draft_of({1, 2, 3, 4}, 4).empty());
  EXPECT_TRUE(draft_of({7}, 4).empty());
  EXPECT_TRUE(draft_of({}, 4).empty());
  EXPECT_TRUE(draft_of({1, 2, 1, 2}, 0).empty());
}

}  // namespace
}  // namespace tessera::serve
