#include "tessera/plan/collectives.h"

#include <gtest/gtest.h>

#include "tests/plan/test_accelerator.h"

namespace tessera::plan {
namespace {

// test_gpu(): 8 chips per domain at 400 GB/s, 50 GB/s between domains; 10 us to start a
// collective, 3 us per NVLink step, 15 us per network step.
constexpr double kUp = 4e11, kOut = 5e10, kStart = 1e-5, kUpStep = 3e-6, kOutStep = 1.5e-5;

// A ring pass through 4 domains of 8: 4 x 7 NVLink steps and 3 network steps; an all-gather
// makes one pass, an all-reduce two, each message paying its start.
TEST(Collectives, RingLatencyCountsEveryStepOnItsLinkClass) {
  const Accelerator a = test_gpu();
  const Collective tiny{
      .kind = CollectiveKind::kAllGather, .bytes = 1, .messages = 1, .ranks = 32, .per_domain = 8};
  const double ring_latency = 28 * kUpStep + 3 * kOutStep;
  EXPECT_NEAR(collective_time(tiny, a).seconds, kStart + ring_latency, 1e-9);
  Collective ten = tiny;
  ten.messages = 10;
  ten.bytes = 10;
  EXPECT_NEAR(collective_time(ten, a).seconds, 10 * (kStart + ring_latency), 1e-8);
}

// A large buffer is bound by bandwidth, its latency under half a percent: 7/8 of it over NVLink,
// 3/4 of a domain's eighth over the network, twice for an all-reduce, whose ring then beats the
// tree.
TEST(Collectives, LargeAllReducesTakeTheRingAtItsBandwidth) {
  const Accelerator a = test_gpu();
  const double bytes = 1e10;
  const CollectiveTime t = collective_time(
      {.kind = CollectiveKind::kAllReduce, .bytes = bytes, .ranks = 32, .per_domain = 8}, a);
  EXPECT_EQ(t.algorithm, CollectiveAlgorithm::kRing);
  const double transfer = 2 * (7.0 / 8 * bytes / kUp + 3.0 / 4 * bytes / 8 / kOut);
  const double latency = kStart + 2 * (28 * kUpStep + 3 * kOutStep);
  EXPECT_NEAR(t.seconds, transfer + latency, 1e-9);
  EXPECT_LT(latency / t.seconds, 0.005);
}

// Over 1024 domains a small all-reduce's ring would take 2 x 1023 network steps; NCCL's tree takes
// 2 x log2(1024) = 20, up and down, and is chosen; an all-gather has only the ring.
TEST(Collectives, SmallAllReducesOverManyDomainsTakeTheTree) {
  const Accelerator a = test_gpu();
  const Collective small{
      .kind = CollectiveKind::kAllReduce, .bytes = 1e5, .ranks = 8192, .per_domain = 8};
  const CollectiveTime t = collective_time(small, a);
  EXPECT_EQ(t.algorithm, CollectiveAlgorithm::kTree);
  const double tree_latency = kStart + 2 * (7 * kUpStep + 10 * kOutStep);
  EXPECT_GT(t.seconds, tree_latency);
  EXPECT_LT(t.seconds, tree_latency + 2 * (1e5 / kUp + 1e5 / 8 / kOut) / 0.9);
  Collective gather = small;
  gather.kind = CollectiveKind::kAllGather;
  const CollectiveTime ring = collective_time(gather, a);
  EXPECT_EQ(ring.algorithm, CollectiveAlgorithm::kRing);
  EXPECT_GT(ring.seconds, 1023 * kOutStep + 1024 * 7 * kUpStep);
}

// On a TPU torus a ring runs along each dimension in turn: 256 chips in 16 x 16 take 2 x 15
// steps, not 255.
TEST(Collectives, ATorusRingStepsAlongEachDimension) {
  Accelerator a = test_gpu();
  a.scaleup_domain = 256;
  a.latency.scaleup_torus_dims = 2;
  const Collective tiny{
      .kind = CollectiveKind::kAllGather, .bytes = 1, .ranks = 256, .per_domain = 256};
  EXPECT_NEAR(collective_time(tiny, a).seconds, kStart + 30 * kUpStep, 1e-9);
  EXPECT_EQ(collective_time({.ranks = 1, .per_domain = 8}, a).seconds, 0);
}

}  // namespace
}  // namespace tessera::plan
