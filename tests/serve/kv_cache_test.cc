#include "tessera/serve/kv_cache.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/expect_error.h"

namespace tessera::serve {
namespace {

model::ModelConfig small_config() {
  model::ModelConfig c;
  c.arch = model::Architecture::kLlama;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.d_model = 16;
  return c;
}

TEST(PagedKvCache, AllocatesWholeBlocksUpFront) {
  const PagedKvCache cache(small_config(), 33, 8);
  EXPECT_EQ(cache.blocks_total(), 5);
  EXPECT_EQ(cache.blocks_free(), 5);
  EXPECT_EQ(cache.blocks_used(), 0);
  // 2 layers x (K and V) x 5 blocks x 8 tokens x (2 kv heads x 4 channels) floats.
  EXPECT_EQ(cache.bytes(), 2 * 2 * 5 * 8 * 8 * 4);
}

TEST(PagedKvCache, ReserveTakesBlocksOnlyAsTheSequenceGrows) {
  PagedKvCache cache(small_config(), 64, 4);
  const int64_t a = cache.add_sequence();
  ASSERT_TRUE(cache.reserve(a, 5));
  EXPECT_EQ(cache.block_table(a).size(), 2u);
  EXPECT_EQ(cache.length(a), 0);
  cache.advance(a, 5);
  EXPECT_EQ(cache.length(a), 5);
  ASSERT_TRUE(cache.reserve(a, 3));  // positions 5..7 still fit the second block
  EXPECT_EQ(cache.blocks_used(), 2);
  cache.advance(a, 3);
  ASSERT_TRUE(cache.reserve(a, 1));
  EXPECT_EQ(cache.blocks_used(), 3);
  testing::expect_error([&] { cache.advance(a, 5); }, {"only 12 are reserved"});
}

TEST(PagedKvCache, ExhaustionReturnsFalseAndChangesNothing) {
  PagedKvCache cache(small_config(), 16, 4);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  ASSERT_TRUE(cache.reserve(a, 10));
  cache.advance(a, 10);
  EXPECT_FALSE(cache.reserve(b, 9));
  EXPECT_TRUE(cache.block_table(b).empty());
  EXPECT_EQ(cache.blocks_free(), 1);
  EXPECT_FALSE(cache.reserve(a, 7));
  EXPECT_EQ(cache.block_table(a).size(), 3u);
  EXPECT_EQ(cache.length(a), 10);
  EXPECT_TRUE(cache.reserve(b, 4));
  EXPECT_EQ(cache.blocks_free(), 0);
}

TEST(PagedKvCache, ReleasedBlocksServeTheNextSequence) {
  PagedKvCache cache(small_config(), 16, 4);
  const int64_t a = cache.add_sequence();
  ASSERT_TRUE(cache.reserve(a, 16));
  const std::set<int32_t> blocks_of_a(cache.block_table(a).begin(), cache.block_table(a).end());
  EXPECT_EQ(blocks_of_a.size(), 4u);
  cache.release(a);
  EXPECT_EQ(cache.blocks_free(), 4);
  testing::expect_error([&] { cache.length(a); }, {"no sequence"});
  const int64_t b = cache.add_sequence();
  EXPECT_NE(b, a);
  ASSERT_TRUE(cache.reserve(b, 16));
  const std::set<int32_t> blocks_of_b(cache.block_table(b).begin(), cache.block_table(b).end());
  EXPECT_EQ(blocks_of_b, blocks_of_a);
}

TEST(PagedKvCache, RowsOfDifferentPositionsAndLayersDoNotOverlap) {
  PagedKvCache cache(small_config(), 32, 4);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  ASSERT_TRUE(cache.reserve(a, 6));
  ASSERT_TRUE(cache.reserve(b, 6));
  const int64_t width = 8;
  std::set<float*> rows;
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t seq : {a, b}) {
      for (int64_t p = 0; p < 6; ++p) {
        rows.insert(cache.k_row(l, seq, p));
        rows.insert(cache.v_row(l, seq, p));
      }
    }
  }
  EXPECT_EQ(rows.size(), 2u * 2 * 2 * 6);
  EXPECT_EQ(cache.k_row(0, a, 1) - cache.k_row(0, a, 0), width);
  const model::KvCacheView view = cache.view();
  EXPECT_EQ(view.k.size(), 2u);
  EXPECT_EQ(view.block_tokens, 4);
  testing::expect_error([&] { cache.k_row(0, a, 8); }, {"position 8"});
}

}  // namespace
}  // namespace tessera::serve
