#include "tessera/data/loader.h"

#include <gtest/gtest.h>

#include <vector>

#include "tessera/core/error.h"
#include "tests/data/memory_stream.h"

namespace tessera::data {
namespace {

constexpr int64_t kSeq = 8;

// Rows of one batch as (inputs, targets) vectors, for comparison.
struct Rows {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Rows&) const = default;
};

Rows rows_of(const Batch& b, int64_t batch) {
  return {{b.inputs, b.inputs + batch * kSeq}, {b.targets, b.targets + batch * kSeq}};
}

LoaderOptions options(int64_t batch, int64_t rank = 0, int64_t world = 1, int64_t prefetch = 2) {
  return {.batch_size = batch,
          .seq_len = kSeq,
          .seed = 11,
          .rank = rank,
          .world = world,
          .prefetch = prefetch};
}

std::vector<Rows> take(Loader& loader, int64_t batch, int n) {
  std::vector<Rows> out;
  for (int i = 0; i < n; ++i) out.push_back(rows_of(loader.next(), batch));
  return out;
}

class LoaderTest : public ::testing::Test {
 protected:
  // About 12 windows per epoch, so the runs below cross several epochs.
  testing::MemoryStream tokens_{{40, 33, 30}};
};

TEST_F(LoaderTest, SameSeedSameBatchesAndPositionCountsSamples) {
  Loader a(tokens_.stream(), options(4), 0), b(tokens_.stream(), options(4), 0);
  EXPECT_EQ(take(a, 4, 20), take(b, 4, 20));
  EXPECT_EQ(a.position(), 80);
  LoaderOptions other = options(4);
  other.seed = 12;
  Loader c(tokens_.stream(), other, 0);
  EXPECT_NE(take(c, 4, 20), take(b, 4, 20));
}

TEST_F(LoaderTest, PrefetchGivesTheSameBatchesAsFillingInline) {
  for (int64_t prefetch : {1, 2, 5}) {
    Loader inline_fill(tokens_.stream(), options(3, 0, 1, 0), 0);
    Loader prefetched(tokens_.stream(), options(3, 0, 1, prefetch), 0);
    for (int i = 0; i < 30; ++i) {
      const Batch& x = inline_fill.next();
      const Batch& y = prefetched.next();
      EXPECT_EQ(x.first_sample, y.first_sample);
      ASSERT_EQ(rows_of(x, 3), rows_of(y, 3)) << "prefetch " << prefetch << " batch " << i;
      EXPECT_GE(prefetched.last_wait_seconds(), 0.0);
    }
  }
}

TEST_F(LoaderTest, ResumingAtThePositionContinuesExactly) {
  Loader whole(tokens_.stream(), options(4), 0);
  const std::vector<Rows> expected = take(whole, 4, 25);
  Loader first(tokens_.stream(), options(4), 0);
  const std::vector<Rows> before = take(first, 4, 9);
  Loader resumed(tokens_.stream(), options(4), first.position());
  const std::vector<Rows> after = take(resumed, 4, 16);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(before[i], expected[i]) << i;
  for (int i = 0; i < 16; ++i) EXPECT_EQ(after[i], expected[9 + i]) << 9 + i;
}

// Each global batch of world * local sequences, reassembled from the ranks in rank order.
std::vector<Rows> global_batches(const data::TokenStream& tokens, int64_t world, int64_t local,
                                 int64_t position, int n) {
  std::vector<std::unique_ptr<Loader>> ranks;
  for (int64_t r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<Loader>(tokens, options(local, r, world), position));
  }
  std::vector<Rows> out(n);
  for (int i = 0; i < n; ++i) {
    for (auto& rank : ranks) {
      Rows part = rows_of(rank->next(), local);
      out[i].inputs.insert(out[i].inputs.end(), part.inputs.begin(), part.inputs.end());
      out[i].targets.insert(out[i].targets.end(), part.targets.begin(), part.targets.end());
    }
  }
  for (auto& rank : ranks) EXPECT_EQ(rank->position(), position + n * world * local);
  return out;
}

TEST_F(LoaderTest, RanksReadDisjointSlicesAndResumeOnAnotherWorldSize) {
  // One rank with 6 sequences per batch is the reference order.
  Loader single(tokens_.stream(), options(6), 0);
  const std::vector<Rows> expected = take(single, 6, 12);
  // Two ranks of 3 for five batches, then three ranks of 2 from where they stopped.
  const std::vector<Rows> two = global_batches(tokens_.stream(), 2, 3, 0, 5);
  const std::vector<Rows> three = global_batches(tokens_.stream(), 3, 2, 5 * 6, 7);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(two[i], expected[i]) << "batch " << i;
  for (int i = 0; i < 7; ++i) EXPECT_EQ(three[i], expected[5 + i]) << "batch " << 5 + i;
  // Rank 1 of 2 starts half a global batch in.
  Loader rank1(tokens_.stream(), options(3, 1, 2), 0);
  EXPECT_EQ(rank1.next().first_sample, 3);
  EXPECT_EQ(rank1.next().first_sample, 9);
}

TEST_F(LoaderTest, RejectsBadOptions) {
  EXPECT_THROW(Loader(tokens_.stream(), options(0), 0), Error);
  EXPECT_THROW(Loader(tokens_.stream(), options(2, 2, 2), 0), Error);
  EXPECT_THROW(Loader(tokens_.stream(), options(2, 0, 1, -1), 0), Error);
  EXPECT_THROW(Loader(tokens_.stream(), options(2), -4), Error);
  testing::MemoryStream tiny({8});
  EXPECT_THROW(Loader(tiny.stream(), options(1), 0), Error);  // 8 tokens < one window of 9
}

}  // namespace
}  // namespace tessera::data
