#include "tessera/parallel/pipeline_stages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "tests/dist/dist_testing.h"

namespace tessera::dist {
namespace {

using testing::expect_error;
using Blocks = std::vector<int64_t>;

int64_t sum(const Blocks& b) { return std::accumulate(b.begin(), b.end(), int64_t{0}); }

TEST(PipelineStages, EvenBlocksWithoutExtrasSplitEvenly) {
  EXPECT_EQ(parallel::balanced_stage_blocks(12, 4, {}), (Blocks{3, 3, 3, 3}));
  EXPECT_EQ(parallel::balanced_stage_blocks(6, 4, {}), (Blocks{1, 2, 2, 1}));
  EXPECT_EQ(parallel::balanced_stage_blocks(7, 1, {}), (Blocks{7}));
}

// Llama 3 405B: 126 blocks on 16 stages, the first and the last one block short.
TEST(PipelineStages, Llama3TakesABlockOffTheFirstAndLastStage) {
  const Blocks blocks = parallel::balanced_stage_blocks(126, 16, {0.0, 0.65});
  Blocks expected(16, 8);
  expected.front() = expected.back() = 7;
  EXPECT_EQ(blocks, expected);
}

// The largest stage's cost: its blocks, the embedding on the first, the head on the last.
double largest_stage(const Blocks& blocks, const parallel::StageExtras& extras) {
  double largest = 0;
  for (size_t s = 0; s < blocks.size(); ++s) {
    const double extra =
        (s == 0 ? extras.embedding : 0) + (s + 1 == blocks.size() ? extras.head : 0);
    largest = std::max(largest, double(blocks[s]) + extra);
  }
  return largest;
}

// The smallest largest stage over every split of n blocks into `stages` non-empty stages.
double best_largest_stage(int64_t n, int64_t stages, const parallel::StageExtras& extras,
                          Blocks& prefix) {
  if (int64_t(prefix.size()) + 1 == stages) {
    prefix.push_back(n);
    const double cost = largest_stage(prefix, extras);
    prefix.pop_back();
    return cost;
  }
  double best = 1e300;
  for (int64_t k = 1; n - k >= stages - int64_t(prefix.size()) - 1; ++k) {
    prefix.push_back(k);
    best = std::min(best, best_largest_stage(n - k, stages, extras, prefix));
    prefix.pop_back();
  }
  return best;
}

TEST(PipelineStages, TheLargestStageIsAsSmallAsAnySplitMakesIt) {
  for (const parallel::StageExtras extras :
       {parallel::StageExtras{0.1, 4.5}, parallel::StageExtras{0.0, 0.65},
        parallel::StageExtras{1.5, 1.5}, parallel::StageExtras{0, 0}}) {
    for (int64_t n : {6, 12, 13}) {
      for (int64_t stages : {1, 2, 3, 4, 5}) {
        const Blocks blocks = parallel::balanced_stage_blocks(n, stages, extras);
        ASSERT_EQ(int64_t(blocks.size()), stages);
        EXPECT_EQ(sum(blocks), n);
        EXPECT_GE(*std::min_element(blocks.begin(), blocks.end()), 1);
        Blocks prefix;
        EXPECT_NEAR(largest_stage(blocks, extras), best_largest_stage(n, stages, extras, prefix),
                    1e-12)
            << n << " blocks on " << stages << " stages, head " << extras.head;
      }
    }
  }
  // A GPT-2 head, ~4.5 blocks of compute, leaves its stage fewer blocks than the one before.
  const Blocks gpt2 = parallel::balanced_stage_blocks(12, 3, {0.1, 4.5});
  EXPECT_LT(gpt2.back(), gpt2[1]);
}

TEST(PipelineStages, BoundariesAreTheFirstBlockOfEachStage) {
  EXPECT_EQ(parallel::stage_boundaries(Blocks{1, 2, 2, 1}), (Blocks{0, 1, 3, 5, 6}));
}

TEST(PipelineStages, GivenSplitsAreCheckedAgainstTheModel) {
  EXPECT_EQ(parallel::given_stage_blocks(Blocks{1, 3, 2}, 6, 3), (Blocks{1, 3, 2}));
  expect_error(
      [] {
        parallel::given_stage_blocks(Blocks{3, 3}, 6, 3);
      },
      {"mesh.pp_layers = [3, 3]", "2 entries", "mesh.pp = 3"});
  expect_error(
      [] {
        parallel::given_stage_blocks(Blocks{4, 0, 2}, 6, 3);
      },
      {"stage 1 has 0 blocks"});
  expect_error(
      [] {
        parallel::given_stage_blocks(Blocks{2, 2, 3}, 6, 3);
      },
      {"sums to 7", "the model has 6 (model.n_layer)"});
  expect_error([] { parallel::balanced_stage_blocks(3, 4, {}); },
               {"3 blocks cannot fill 4 pipeline stages"});
}

}  // namespace
}  // namespace tessera::dist
