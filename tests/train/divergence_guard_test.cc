#include "tessera/train/divergence_guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tessera::train {
namespace {

using Verdict = DivergenceGuard::Verdict;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(DivergenceGuard, FiniteStepsApplyAndBadOnesSkipUntilARollback) {
  DivergenceGuard guard({.max_bad_steps = 3, .max_rollbacks = 1});
  EXPECT_EQ(guard.judge({.loss = 2.0, .grad_norm = 1.0}), Verdict::kApply);
  EXPECT_EQ(guard.reason(), "");
  EXPECT_EQ(guard.judge({.loss = kNaN, .grad_norm = 1.0}), Verdict::kSkip);
  EXPECT_NE(guard.reason().find("loss is nan"), std::string::npos) << guard.reason();
  EXPECT_EQ(guard.judge({.loss = 2.0, .grad_norm = INFINITY}), Verdict::kSkip);
  EXPECT_NE(guard.reason().find("gradient norm is inf"), std::string::npos) << guard.reason();
  EXPECT_EQ(guard.judge({.loss = 2.0, .overflow_at_floor = true}), Verdict::kRollBack);
  EXPECT_EQ(guard.bad_in_a_row(), 3);
  guard.roll_back(7, "step-000004");
  EXPECT_EQ(guard.rollbacks(), 1);
  EXPECT_EQ(guard.bad_in_a_row(), 0);
}

TEST(DivergenceGuard, AGoodStepResetsTheRunOfBadOnes) {
  DivergenceGuard guard({.max_bad_steps = 2});
  EXPECT_EQ(guard.judge({.loss = kNaN}), Verdict::kSkip);
  EXPECT_EQ(guard.judge({.loss = 1.0}), Verdict::kApply);
  EXPECT_EQ(guard.judge({.loss = kNaN}), Verdict::kSkip);
  EXPECT_EQ(guard.judge({.loss = kNaN}), Verdict::kRollBack);
}

TEST(DivergenceGuard, ALossSpikeCountsOnlyAfterTheWarmUp) {
  DivergenceGuard guard({.loss_spike_factor = 2.0});
  EXPECT_EQ(guard.judge({.loss = 1.0}), Verdict::kApply);
  EXPECT_EQ(guard.judge({.loss = 5.0}), Verdict::kApply) << "no running mean yet";
  for (int i = 0; i < 20; ++i) guard.judge({.loss = 1.0});
  EXPECT_EQ(guard.judge({.loss = 1.9}), Verdict::kApply);
  EXPECT_EQ(guard.judge({.loss = 5.0}), Verdict::kSkip);
  EXPECT_NE(guard.reason().find("spikes above 2 x its running mean"), std::string::npos)
      << guard.reason();
}

TEST(DivergenceGuard, SpentRollbacksEndTheRunNamingTheLastGoodCheckpoint) {
  DivergenceGuard guard({.max_bad_steps = 1, .max_rollbacks = 1});
  ASSERT_EQ(guard.judge({.loss = kNaN}), Verdict::kRollBack);
  guard.roll_back(3, "runs/a/checkpoints/step-000002");
  ASSERT_EQ(guard.judge({.loss = kNaN}), Verdict::kRollBack);
  try {
    guard.roll_back(4, "runs/a/checkpoints/step-000002");
    FAIL() << "no DivergedError";
  } catch (const DivergedError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("train.max_rollbacks"), std::string::npos) << message;
    EXPECT_NE(message.find("runs/a/checkpoints/step-000002"), std::string::npos) << message;
  }
}

// A resumed run judges as the uninterrupted one would, and rollbacks spent stay spent.
TEST(DivergenceGuard, StateRoundTripsAndKeepsTheRollbacksSpent) {
  DivergenceGuard first({.loss_spike_factor = 2.0, .max_bad_steps = 1, .max_rollbacks = 5});
  for (int i = 0; i < 12; ++i) first.judge({.loss = 1.0});
  const nlohmann::json saved = first.state();
  first.judge({.loss = kNaN});
  first.roll_back(13, "x");
  first.restore(saved);
  EXPECT_EQ(first.rollbacks(), 1);
  DivergenceGuard resumed({.loss_spike_factor = 2.0});
  resumed.restore(saved);
  EXPECT_EQ(resumed.judge({.loss = 3.0}), Verdict::kSkip) << "the running mean was restored";
}

}  // namespace
}  // namespace tessera::train
