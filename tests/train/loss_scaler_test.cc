#include "tessera/train/loss_scaler.h"

#include <gtest/gtest.h>

namespace tessera::train {
namespace {

TEST(DynamicLossScaler, HalvesOnOverflowAndDoublesAfterCleanSteps) {
  DynamicLossScaler s(1024, 3);
  EXPECT_FALSE(s.update(false));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 1);
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1024);
  // An overflow restarts the count of clean steps.
  EXPECT_TRUE(s.update(true));
  EXPECT_FALSE(s.update(false));
  EXPECT_TRUE(s.update(true));
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 512);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(DynamicLossScaler, StaysWithinBounds) {
  DynamicLossScaler low(1, 1);
  EXPECT_FALSE(low.update(false));
  EXPECT_EQ(low.scale(), 1);
  DynamicLossScaler high(16777216.0, 1);
  EXPECT_TRUE(high.update(true));
  EXPECT_EQ(high.scale(), 16777216.0);
}

}  // namespace
}  // namespace tessera::train
