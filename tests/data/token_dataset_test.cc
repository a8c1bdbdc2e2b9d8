#include "tessera/data/token_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::data {
namespace {

std::vector<int32_t> arange(int32_t n) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(SplitTokens, HoldsOutTheTail) {
  Split split = split_tokens(arange(1000), 0.1, 16);
  ASSERT_EQ(split.train.size(), 900u);
  ASSERT_EQ(split.val.size(), 100u);
  EXPECT_EQ(split.train.front(), 0);
  EXPECT_EQ(split.train.back(), 899);
  EXPECT_EQ(split.val.front(), 900);
  EXPECT_EQ(split.val.back(), 999);
}

TEST(SplitTokens, TooSmallCorpusNamesTheSizes) {
  try {
    split_tokens(arange(900), 0.1, 256);
    FAIL() << "accepted a validation split shorter than one sequence";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "corpus too small: 900 tokens give a validation split of 90, but one sequence "
                 "needs 257");
  }
  try {
    split_tokens(arange(1000), 0.9, 256);
    FAIL() << "accepted a training split shorter than one sequence";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training split of 100"), std::string::npos) << e.what();
  }
  // Exactly seq_len + 1 on both sides is enough.
  EXPECT_NO_THROW(split_tokens(arange(20), 0.5, 9));
  EXPECT_THROW(split_tokens(arange(20), 0.5, 10), Error);
  EXPECT_THROW(split_tokens(arange(1000), 0.0, 4), Error);
  EXPECT_THROW(split_tokens(arange(1000), 1.0, 4), Error);
}

TEST(UnigramEntropy, KnownDistributions) {
  std::vector<int32_t> uniform4 = {0, 1, 2, 3, 3, 2, 1, 0};
  EXPECT_NEAR(unigram_entropy(uniform4, 256), std::log(4.0), 1e-12);
  std::vector<int32_t> single(100, 7);
  EXPECT_NEAR(unigram_entropy(single, 256), 0.0, 1e-12);
  std::vector<int32_t> skewed = {0, 0, 0, 1};  // p = 3/4, 1/4
  EXPECT_NEAR(unigram_entropy(skewed, 2), -(0.75 * std::log(0.75) + 0.25 * std::log(0.25)), 1e-12);
  std::vector<int32_t> bad = {0, 256};
  EXPECT_THROW(unigram_entropy(bad, 256), Error);
}

class BatchSamplerTest : public ::testing::Test {
 protected:
  static constexpr int64_t kBatch = 4, kSeq = 8;
  std::vector<int32_t> tokens_ = arange(1000);
  std::vector<int32_t> inputs_ = std::vector<int32_t>(kBatch * kSeq);
  std::vector<int32_t> targets_ = std::vector<int32_t>(kBatch * kSeq);
};

TEST_F(BatchSamplerTest, WindowsAreContiguousInRangeAndShifted) {
  BatchSampler sampler(tokens_, kBatch, kSeq, 42);
  EXPECT_EQ(sampler.window_count(), 1000 - kSeq);
  for (int64_t index = 0; index < 200; index += kBatch) {
    sampler.fill(index, inputs_.data(), targets_.data());
    for (int64_t b = 0; b < kBatch; ++b) {
      const int32_t start = inputs_[b * kSeq];
      EXPECT_GE(start, 0);
      EXPECT_LT(start, sampler.window_count());
      for (int64_t t = 0; t < kSeq; ++t) {
        EXPECT_EQ(inputs_[b * kSeq + t], start + t);
        EXPECT_EQ(targets_[b * kSeq + t], start + t + 1);
      }
    }
  }
}

TEST_F(BatchSamplerTest, SameIndexSameBatchDifferentIndexDifferent) {
  BatchSampler sampler(tokens_, kBatch, kSeq, 42);
  BatchSampler again(tokens_, kBatch, kSeq, 42);
  std::vector<int32_t> inputs2(kBatch * kSeq), targets2(kBatch * kSeq);
  sampler.fill(96, inputs_.data(), targets_.data());
  again.fill(96, inputs2.data(), targets2.data());
  EXPECT_EQ(inputs_, inputs2);
  EXPECT_EQ(targets_, targets2);
  again.fill(100, inputs2.data(), targets2.data());
  EXPECT_NE(inputs_, inputs2);
  BatchSampler other_seed(tokens_, kBatch, kSeq, 43);
  other_seed.fill(96, inputs2.data(), targets2.data());
  EXPECT_NE(inputs_, inputs2);
}

TEST_F(BatchSamplerTest, SampleIndexIsAGlobalSequenceNumber) {
  // A batch-4 fill at index 8 must equal sequences 8..11 drawn one at a time, so changing the
  // micro-batch split (grad_accum) or resuming mid-run reproduces the same stream.
  BatchSampler wide(tokens_, kBatch, kSeq, 7);
  BatchSampler narrow(tokens_, 1, kSeq, 7);
  wide.fill(8, inputs_.data(), targets_.data());
  std::vector<int32_t> one_in(kSeq), one_tg(kSeq);
  for (int64_t b = 0; b < kBatch; ++b) {
    narrow.fill(8 + b, one_in.data(), one_tg.data());
    EXPECT_TRUE(std::equal(one_in.begin(), one_in.end(), inputs_.begin() + b * kSeq)) << b;
    EXPECT_TRUE(std::equal(one_tg.begin(), one_tg.end(), targets_.begin() + b * kSeq)) << b;
  }
}

TEST_F(BatchSamplerTest, ReachesEveryWindowIncludingTheLast) {
  std::vector<int32_t> small = arange(10);  // seq 4 -> windows start at 0..5
  BatchSampler sampler(small, 1, 4, 3);
  ASSERT_EQ(sampler.window_count(), 6);
  std::set<int32_t> starts;
  int32_t in[4], tg[4];
  for (int64_t i = 0; i < 500; ++i) {
    sampler.fill(i, in, tg);
    starts.insert(in[0]);
    EXPECT_EQ(tg[3], in[0] + 4);
  }
  EXPECT_EQ(starts, (std::set<int32_t>{0, 1, 2, 3, 4, 5}));
}

TEST_F(BatchSamplerTest, RejectsTooFewTokens) {
  std::vector<int32_t> small = arange(8);
  EXPECT_THROW(BatchSampler(small, 1, 8, 0), Error);
  EXPECT_NO_THROW(BatchSampler(arange(9), 1, 8, 0));
}

TEST(FillEvalBatch, EvenlySpacedAndStable) {
  std::vector<int32_t> tokens = arange(1000);
  const int64_t batch = 2, seq = 10, eval_batches = 5;
  std::vector<int32_t> starts;
  for (int64_t i = 0; i < eval_batches; ++i) {
    std::vector<int32_t> in(batch * seq), tg(batch * seq), in2(batch * seq), tg2(batch * seq);
    fill_eval_batch(tokens, batch, seq, i, eval_batches, in.data(), tg.data());
    fill_eval_batch(tokens, batch, seq, i, eval_batches, in2.data(), tg2.data());
    EXPECT_EQ(in, in2);
    EXPECT_EQ(tg, tg2);
    for (int64_t b = 0; b < batch; ++b) {
      starts.push_back(in[b * seq]);
      for (int64_t t = 0; t < seq; ++t) {
        EXPECT_EQ(in[b * seq + t], in[b * seq] + t);
        EXPECT_EQ(tg[b * seq + t], in[b * seq] + t + 1);
      }
    }
  }
  // 10 windows over 990 possible starts: 0, 99, 198, ..., 891.
  ASSERT_EQ(starts.size(), 10u);
  for (size_t w = 0; w < starts.size(); ++w) EXPECT_EQ(starts[w], static_cast<int32_t>(99 * w));
  int32_t in[10], tg[10];
  EXPECT_THROW(fill_eval_batch(tokens, batch, seq, 5, eval_batches, in, tg), Error);
}

}  // namespace
}  // namespace tessera::data
