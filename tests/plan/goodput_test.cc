#include "tessera/plan/goodput.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tessera::plan {
namespace {

// Llama 3 405B's pre-training: 16,384 H100s, master weights and AdamW moments of 405B parameters
// (12 bytes each), at the paper's own failure rate and storage rate. The paper reports more than
// 90% effective training time over the same 54 days.
TEST(Goodput, Llama3ScaleSpendsUnderATenthOnFailures) {
  const Goodput g = expected_goodput(405e9 * 12, 16384, Reliability{});
  EXPECT_NEAR(g.mean_time_between_failures_s / 3600, 54.0 * 24 / 419, 1e-9);
  EXPECT_NEAR(g.checkpoint_s, 405e9 * 12 / 2e12, 1e-9);
  EXPECT_GT(g.fraction, 0.90);
  EXPECT_LT(g.fraction, 0.95);
}

TEST(Goodput, TheIntervalMinimisesWhatIsLost) {
  const Reliability r{
      .failures_per_chip_hour = 1e-4, .restart_s = 300, .checkpoint_bytes_per_s_per_chip = 1e8};
  const Goodput best = expected_goodput(1e12, 1024, r);
  auto lost = [&](double interval) {
    return best.checkpoint_s / interval +
           (interval / 2 + r.restart_s) / best.mean_time_between_failures_s;
  };
  EXPECT_NEAR(1 - best.fraction, lost(best.interval_s), 1e-12);
  EXPECT_LT(lost(best.interval_s), lost(best.interval_s * 0.8));
  EXPECT_LT(lost(best.interval_s), lost(best.interval_s * 1.25));
}

TEST(Goodput, MoreChipsFailMoreOften) {
  const Reliability r;
  EXPECT_GT(expected_goodput(1e13, 1024, r).fraction, expected_goodput(1e13, 8192, r).fraction);
}

TEST(Goodput, NoFailuresLoseNothing) {
  const Goodput g = expected_goodput(1e13, 4096, Reliability{.failures_per_chip_hour = 0});
  EXPECT_EQ(g.fraction, 1.0);
  EXPECT_TRUE(std::isinf(g.interval_s));
}

TEST(Goodput, FailuresFasterThanRestartsNeverFinish) {
  const Goodput g =
      expected_goodput(1e13, 4096, Reliability{.failures_per_chip_hour = 1, .restart_s = 600});
  EXPECT_EQ(g.fraction, 0.0);
}

}  // namespace
}  // namespace tessera::plan
