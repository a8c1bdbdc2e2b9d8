#include "tessera/data/windows.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/targets.h"
#include "tests/data/memory_stream.h"

namespace tessera::data {
namespace {

TEST(WindowPermutation, IsABijectionForEverySize) {
  for (uint64_t n : {1, 2, 3, 4, 5, 7, 16, 17, 100, 1000, 1023, 1024, 1025, 4099}) {
    WindowPermutation p(n, 42, 3);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t v = p(i);
      ASSERT_LT(v, n);
      ASSERT_FALSE(seen[v]) << "n " << n << " repeats " << v;
      seen[v] = true;
    }
  }
}

TEST(WindowPermutation, DependsOnSeedAndEpochAndShuffles) {
  const uint64_t n = 1000;
  auto order = [&](uint64_t seed, uint64_t epoch) {
    WindowPermutation p(n, seed, epoch);
    std::vector<uint64_t> v;
    for (uint64_t i = 0; i < n; ++i) v.push_back(p(i));
    return v;
  };
  EXPECT_EQ(order(1, 0), order(1, 0));
  EXPECT_NE(order(1, 0), order(1, 1));
  EXPECT_NE(order(1, 0), order(2, 0));
  int fixed_points = 0, ascending = 0;
  const std::vector<uint64_t> v = order(1, 0);
  for (uint64_t i = 0; i < n; ++i) {
    fixed_points += v[i] == i;
    if (i > 0) ascending += v[i] > v[i - 1];
  }
  EXPECT_LT(fixed_points, 10);  // about 1 expected
  EXPECT_NEAR(ascending, 500, 60);
}

TEST(TrainWindows, EachEpochReadsEveryWindowOnceAtOnePhase) {
  const int64_t tokens = 1000, seq = 16;
  TrainWindows w(tokens, seq, 9);
  const int64_t n = w.windows_per_epoch();
  EXPECT_EQ(n, (tokens - seq) / seq);
  std::set<int64_t> phases;
  for (int64_t epoch = 0; epoch < 6; ++epoch) {
    std::set<int64_t> starts;
    for (int64_t i = 0; i < n; ++i) starts.insert(w.start(epoch * n + i));
    ASSERT_EQ(int64_t(starts.size()), n);
    const int64_t phase = *starts.begin();
    EXPECT_LT(phase, seq);
    for (int64_t s : starts) {
      EXPECT_EQ((s - phase) % seq, 0);
      EXPECT_LE(s + seq + 1, tokens);
    }
    phases.insert(phase);
  }
  EXPECT_GT(phases.size(), 1u);
}

TEST(TrainWindows, TinySplitsStillGiveOneWindow) {
  TrainWindows exact(17, 16, 0);
  EXPECT_EQ(exact.windows_per_epoch(), 1);
  EXPECT_EQ(exact.start(5), 0);
  TrainWindows spare(20, 16, 0);
  for (int64_t g = 0; g < 50; ++g) EXPECT_LE(spare.start(g) + 17, 20);
  try {
    TrainWindows(16, 16, 0);
    FAIL() << "accepted a split shorter than one window";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "the training split holds 16 tokens, too few for one sequence of seq_len 16 + 1");
  }
}

TEST(FillBatches, WindowsCrossShardBoundariesAndTargetsAreShifted) {
  testing::MemoryStream tokens({7, 0, 30, 13, 50});
  const int64_t batch = 3, seq = 10;
  TrainWindows w(tokens.stream().size(), seq, 4);
  std::vector<int32_t> in(batch * seq), tg(batch * seq);
  for (int64_t first = 0; first < 40; first += batch) {
    fill_train_batch(tokens.stream(), w, first, batch, seq, in.data(), tg.data());
    for (int64_t b = 0; b < batch; ++b) {
      EXPECT_EQ(in[b * seq], w.start(first + b));
      for (int64_t t = 0; t < seq; ++t) {
        EXPECT_EQ(in[b * seq + t], in[b * seq] + t);
        EXPECT_EQ(tg[b * seq + t], in[b * seq] + t + 1);
      }
    }
  }
}

// A target the loss mask leaves out is ignored, across shard boundaries; inputs stay whole.
TEST(FillBatches, TargetsOutsideTheLossMaskAreIgnored) {
  testing::MemoryStream tokens({7, 0, 30, 13, 50}, true);
  const int64_t batch = 3, seq = 10;
  TrainWindows w(tokens.stream().size(), seq, 4);
  std::vector<int32_t> in(batch * seq), tg(batch * seq);
  fill_train_batch(tokens.stream(), w, 0, batch, seq, in.data(), tg.data());
  for (int64_t i = 0; i < batch * seq; ++i) {
    const int32_t next = in[i] + 1;
    EXPECT_EQ(tg[i], next % 3 != 0 ? next : kIgnoredTarget) << i;
  }
  fill_eval_batch(tokens.stream(), batch, seq, 1, 2, in.data(), tg.data());
  for (int64_t i = 0; i < batch * seq; ++i) {
    EXPECT_EQ(tg[i], (in[i] + 1) % 3 != 0 ? in[i] + 1 : kIgnoredTarget) << i;
  }
}

TEST(FillBatches, EvalWindowsAreEvenlySpacedAndStable) {
  testing::MemoryStream tokens({400, 600});
  const int64_t batch = 2, seq = 10, eval_batches = 5;
  std::vector<int32_t> starts;
  for (int64_t i = 0; i < eval_batches; ++i) {
    std::vector<int32_t> in(batch * seq), tg(batch * seq);
    fill_eval_batch(tokens.stream(), batch, seq, i, eval_batches, in.data(), tg.data());
    for (int64_t b = 0; b < batch; ++b) {
      starts.push_back(in[b * seq]);
      EXPECT_EQ(tg[b * seq + seq - 1], in[b * seq] + seq);
    }
  }
  // 10 windows over 990 possible starts: 0, 99, 198, ..., 891.
  ASSERT_EQ(starts.size(), 10u);
  for (size_t w = 0; w < starts.size(); ++w) EXPECT_EQ(starts[w], int32_t(99 * w));
  int32_t in[10], tg[10];
  EXPECT_THROW(fill_eval_batch(tokens.stream(), 1, seq, 5, eval_batches, in, tg), Error);
}

}  // namespace
}  // namespace tessera::data
