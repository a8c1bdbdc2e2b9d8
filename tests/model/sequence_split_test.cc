// Context parallelism's split of a sequence: two balanced chunks per rank, and the copies between
// a rank's rows and whole sequences.
#include "tessera/model/sequence_split.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::model {
namespace {

TEST(SequenceSplit, EachRankHoldsAnEarlyAndALateChunk) {
  // 16 positions over 4 ranks: chunks of 2, rank r holding chunks r and 7 - r.
  const int64_t T = 4;
  std::vector<int64_t> owner(16, -1);
  for (int64_t r = 0; r < 4; ++r) {
    const SequenceSplit split{4, r};
    SequenceSplit::Runs runs;
    ASSERT_EQ(split.runs(T, runs), 2);
    EXPECT_EQ(runs[0].position, 2 * r);
    EXPECT_EQ(runs[1].position, 2 * (7 - r));
    const kernels::QueryChunks q = split.queries(T);
    EXPECT_EQ(q.count, 2);
    EXPECT_EQ(q.length, 2);
    EXPECT_EQ(q.start[0], runs[0].position);
    EXPECT_EQ(q.start[1], runs[1].position);
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t p = runs[i].position; p < runs[i].position + runs[i].n; ++p) {
        EXPECT_EQ(owner[p], -1) << p;
        owner[p] = r;
      }
    }
  }
  EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
  SequenceSplit::Runs runs;
  EXPECT_EQ(SequenceSplit{}.runs(5, runs), 1);
  EXPECT_THROW(SequenceSplit({2, 0}).runs(3, runs), Error);
}

TEST(SequenceSplit, RowsAndSequencesRoundTripByColumns) {
  const SequenceSplit split{2, 1};
  const int64_t B = 2, T = 4, full = split.full_length(T), ld = 3;
  std::vector<float> sequences(B * full * ld);
  std::iota(sequences.begin(), sequences.end(), 0.0f);
  // Rank 1 holds positions 2, 3 and 4, 5 of each sequence; columns 1 and 2 of each row.
  std::vector<float> rows(B * T * 2, -1.0f);
  split.to_rows(1, sequences.data() + 1, ld, rows.data(), 2, B, T, 2);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t positions[] = {2, 3, 4, 5};
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < 2; ++c) {
        EXPECT_EQ(rows[(b * T + t) * 2 + c], sequences[(b * full + positions[t]) * ld + 1 + c]);
      }
    }
  }
  std::vector<float> back(sequences.size(), -1.0f);
  split.to_sequences(1, rows.data(), 2, back.data() + 1, ld, B, T, 2);
  for (size_t i = 0; i < back.size(); ++i) {
    const int64_t position = int64_t(i) / ld % full, column = int64_t(i) % ld;
    const bool held = position >= 2 && position < 6 && column > 0;
    EXPECT_EQ(back[i], held ? sequences[i] : -1.0f) << i;
  }
  std::vector<int32_t> ids(B * full), mine(B * T);
  std::iota(ids.begin(), ids.end(), 0);
  split.take(ids.data(), mine.data(), B, T);
  EXPECT_EQ(mine, (std::vector<int32_t>{2, 3, 4, 5, 10, 11, 12, 13}));
}

}  // namespace
}  // namespace tessera::model
