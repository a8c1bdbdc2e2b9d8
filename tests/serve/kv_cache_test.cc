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

// Token ids 0, 1, 2, ... n-1 shifted by `from`.
std::vector<int32_t> tokens(int64_t n, int32_t from = 0) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = from + int32_t(i);
  return t;
}

TEST(PagedKvCache, AllocatesWholeBlocksUpFront) {
  const PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 33, 8);
  EXPECT_EQ(cache.blocks_total(), 5);
  EXPECT_EQ(cache.blocks_free(), 5);
  EXPECT_EQ(cache.blocks_used(), 0);
  // 2 layers x (K and V) x 5 blocks x 8 tokens x (2 kv heads x 4 channels) floats.
  EXPECT_EQ(cache.bytes(), 2 * 2 * 5 * 8 * 8 * 4);
}

TEST(PagedKvCache, ReserveTakesBlocksOnlyAsTheSequenceGrows) {
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 64, 4);
  const int64_t a = cache.add_sequence();
  ASSERT_TRUE(cache.reserve(a, 5));
  EXPECT_EQ(cache.block_table(a).size(), 2u);
  EXPECT_EQ(cache.length(a), 0);
  cache.advance(a, tokens(5));
  EXPECT_EQ(cache.length(a), 5);
  ASSERT_TRUE(cache.reserve(a, 3));  // positions 5..7 still fit the second block
  EXPECT_EQ(cache.blocks_used(), 2);
  cache.advance(a, tokens(3));
  ASSERT_TRUE(cache.reserve(a, 1));
  EXPECT_EQ(cache.blocks_used(), 3);
  testing::expect_error([&] { cache.advance(a, tokens(5)); }, {"only 12 are reserved"});
}

TEST(PagedKvCache, ExhaustionReturnsFalseAndChangesNothing) {
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 16, 4);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  ASSERT_TRUE(cache.reserve(a, 10));
  cache.advance(a, tokens(10));
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
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 16, 4);
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
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 32, 4);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  ASSERT_TRUE(cache.reserve(a, 6));
  ASSERT_TRUE(cache.reserve(b, 6));
  const int64_t width = 8;
  std::set<uint8_t*> rows;
  for (int64_t l = 0; l < 2; ++l) {
    for (int64_t seq : {a, b}) {
      for (int64_t p = 0; p < 6; ++p) {
        rows.insert(cache.k_row(l, seq, p));
        rows.insert(cache.v_row(l, seq, p));
      }
    }
  }
  EXPECT_EQ(rows.size(), 2u * 2 * 2 * 6);
  EXPECT_EQ(cache.k_row(0, a, 1) - cache.k_row(0, a, 0), width * int64_t(sizeof(float)));
  const runtime::KvCacheView view = cache.view();
  EXPECT_EQ(view.k.size(), 2u);
  EXPECT_EQ(view.block_tokens, 4);
  testing::expect_error([&] { cache.k_row(0, a, 8); }, {"position 8"});
}

// Runs a sequence over `prompt` the way the engine does: cached blocks first, then the rest.
// Returns its id and how many tokens came from the cache.
std::pair<int64_t, int64_t> fill(PagedKvCache& cache, const std::vector<int32_t>& prompt) {
  const int64_t seq = cache.add_sequence();
  const int64_t reused = cache.attach_cached_prefix(seq, prompt);
  const std::span<const int32_t> rest(prompt.begin() + reused, prompt.end());
  EXPECT_TRUE(cache.reserve(seq, int64_t(rest.size())));
  cache.advance(seq, rest);
  return {seq, reused};
}

TEST(PrefixCache, ASharedPrefixReusesFullBlocksButNeverTheLastToken) {
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 64, 4,
                     /*prefix_caching=*/true);
  std::vector<int32_t> prompt = tokens(10);
  const auto [a, none] = fill(cache, prompt);
  EXPECT_EQ(none, 0);
  // The same 8 leading tokens: the two full blocks are shared, the partial third is not.
  std::vector<int32_t> other = tokens(8);
  other.push_back(99);
  const auto [b, reused] = fill(cache, other);
  EXPECT_EQ(reused, 8);
  EXPECT_EQ(cache.block_table(b)[0], cache.block_table(a)[0]);
  EXPECT_EQ(cache.block_table(b)[1], cache.block_table(a)[1]);
  EXPECT_NE(cache.block_table(b)[2], cache.block_table(a)[2]);
  EXPECT_EQ(cache.blocks_used(), 4);  // 3 of a, 1 of b's own
  // A prompt that is exactly two cached blocks keeps its last block to compute its logits.
  const auto [c, reused_c] = fill(cache, tokens(8));
  EXPECT_EQ(reused_c, 4);
  EXPECT_EQ(cache.length(c), 8);
}

TEST(PrefixCache, ADifferentEarlierTokenMeansNoReuseOfLaterBlocks) {
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 64, 4, true);
  fill(cache, tokens(12));
  std::vector<int32_t> changed = tokens(12);
  changed[1] = 77;  // the second block's tokens still agree, but not what comes before them
  const auto [b, reused] = fill(cache, changed);
  EXPECT_EQ(reused, 0);
}

TEST(PrefixCache, EndedSequencesStayCachedUntilTheirRoomIsNeeded) {
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 16, 4,
                     true);                       // 4 blocks
  const auto [a, none] = fill(cache, tokens(9));  // 2 full blocks and a partial one
  cache.release(a);
  EXPECT_EQ(cache.blocks_free(), 4);
  EXPECT_EQ(cache.blocks_cached(), 2);  // the partial block went back as free
  const auto [b, reused] = fill(cache, tokens(9));
  EXPECT_EQ(reused, 8);
  cache.release(b);
  // A sequence that needs every block takes the cached ones, later blocks first.
  const auto [c, reused_c] = fill(cache, tokens(16, 100));
  EXPECT_EQ(reused_c, 0);
  EXPECT_EQ(cache.blocks_cached(), 0);
  cache.release(c);
  const auto [d, reused_d] = fill(cache, tokens(9));
  EXPECT_EQ(reused_d, 0);
}

TEST(PrefixCache, SharedBlocksReturnOnlyWhenTheLastHolderLetsGo) {
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 32, 4, true);
  const auto [a, ra] = fill(cache, tokens(9));
  const auto [b, rb] = fill(cache, tokens(9));
  EXPECT_EQ(rb, 8);
  EXPECT_EQ(cache.blocks_used(), 4);
  cache.release(a);
  EXPECT_EQ(cache.blocks_used(), 3);  // b still holds the shared pair
  EXPECT_EQ(cache.blocks_cached(), 0);
  cache.release(b);
  EXPECT_EQ(cache.blocks_used(), 0);
  EXPECT_EQ(cache.blocks_cached(), 2);
}

TEST(PrefixCache, OffByDefault) {
  PagedKvCache cache(kernels::kCpuContext, model::model_layout(small_config()), 64, 4);
  fill(cache, tokens(12));
  const auto [b, reused] = fill(cache, tokens(12));
  EXPECT_EQ(reused, 0);
  EXPECT_EQ(cache.blocks_cached(), 0);
}

TEST(BlockKey, ChainsOverTheWholePrefix) {
  const std::vector<int32_t> x = {1, 2, 3, 4}, y = {1, 2, 3, 5};
  const BlockKey kx = chain_block_key(kRootBlockKey, x);
  EXPECT_EQ(kx, chain_block_key(kRootBlockKey, x));
  EXPECT_NE(kx, chain_block_key(kRootBlockKey, y));
  EXPECT_NE(chain_block_key(kx, x), chain_block_key(chain_block_key(kRootBlockKey, y), x));
}

}  // namespace
}  // namespace tessera::serve
