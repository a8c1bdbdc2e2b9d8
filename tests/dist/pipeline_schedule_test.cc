#include "tessera/parallel/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "tessera/parallel/pipeline_simulator.h"
#include "tests/dist/dist_testing.h"

namespace tessera::dist {
namespace {

using testing::expect_error;
using Kind = parallel::PipelineAction::Kind;
using S = comm::PipelineScheduleKind;

// Forward, input gradient and weight gradient take the same time: the whole backward twice the
// forward, as in a transformer.
constexpr parallel::PipelineCosts kEven{1, 1, 1};

TEST(PipelineSchedule, OneFOneBAndGPipeBubbleIsPMinusOneOverM) {
  for (int p : {2, 4, 8}) {
    for (int m : {1, 3, p, 2 * p, 16}) {
      for (S kind : {S::k1F1B, S::kGPipe}) {
        const parallel::PipelineSimulation sim =
            parallel::simulate_pipeline(parallel::make_pipeline_table(kind, p, 1, m), kEven);
        EXPECT_NEAR(sim.bubble, double(p - 1) / m, 1e-12)
            << enum_name(kind) << " p=" << p << " m=" << m;
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBHoldsPMinusRankMicroBatchesWhereGPipeHoldsAll) {
  const int p = 4, m = 8;
  const parallel::PipelineSimulation one =
      parallel::simulate_pipeline(parallel::make_pipeline_table(S::k1F1B, p, 1, m));
  const parallel::PipelineSimulation gpipe =
      parallel::simulate_pipeline(parallel::make_pipeline_table(S::kGPipe, p, 1, m));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(one.peak_in_flight[r], p - r) << "rank " << r;
    EXPECT_EQ(gpipe.peak_in_flight[r], m) << "rank " << r;
    EXPECT_EQ(one.stage_peak_in_flight[r], p - r) << "stage " << r;
  }
  // Interleaved: each rank's stages together hold at least its peak, and none more than it.
  const parallel::PipelineTable table = parallel::make_pipeline_table(S::kInterleaved1F1B, p, 2, m);
  const parallel::PipelineSimulation interleaved = parallel::simulate_pipeline(table);
  for (int r = 0; r < p; ++r) {
    const int first = interleaved.stage_peak_in_flight[r];
    const int second = interleaved.stage_peak_in_flight[r + p];
    EXPECT_GE(first + second, interleaved.peak_in_flight[r]) << "rank " << r;
    EXPECT_LE(std::max(first, second), interleaved.peak_in_flight[r]) << "rank " << r;
    EXPECT_GE(std::min(first, second), 1) << "rank " << r;
  }
}

TEST(PipelineSchedule, InterleavedBubbleIsPMinusOneOverVM) {
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 4 * p}) {
        const parallel::PipelineSimulation sim = parallel::simulate_pipeline(
            parallel::make_pipeline_table(S::kInterleaved1F1B, p, v, m), kEven);
        EXPECT_NEAR(sim.bubble, double(p - 1) / (v * m), 1e-12)
            << "p=" << p << " v=" << v << " m=" << m;
      }
    }
  }
}

TEST(PipelineSchedule, ZeroBubbleWaitsAThirdOfOneFOneB) {
  for (int p : {2, 4, 8}) {
    for (int m : {p, 2 * p, 24}) {
      const parallel::PipelineSimulation zb = parallel::simulate_pipeline(
          parallel::make_pipeline_table(S::kZeroBubbleH1, p, 1, m), kEven);
      const parallel::PipelineSimulation one =
          parallel::simulate_pipeline(parallel::make_pipeline_table(S::k1F1B, p, 1, m), kEven);
      EXPECT_LT(zb.bubble, one.bubble) << "p=" << p << " m=" << m;
      // ZB-H1's bubble is a third of 1F1B's when the three parts take the same time.
      EXPECT_NEAR(zb.bubble, one.bubble / 3, 1e-12) << "p=" << p << " m=" << m;
      // Counted until its weight gradient, a rank holds at most the first rank's p micro-batches
      // of 1F1B and the p - 1 whose weight gradients wait for the cool-down.
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(zb.peak_in_flight[r], std::min(m, 2 * p - 1)) << "p=" << p << " r=" << r;
      }
    }
  }
}

// Laid out by the stages' own costs, ZB-H1 still waits less than 1F1B where the parts differ and
// the last stage's forward carries the head; a table laid out for equal costs waited more than
// 1F1B with the first costs below (0.149 against 0.125 at p = 2, m = 8).
TEST(PipelineSchedule, ZeroBubbleLaidOutByTheStagesCostsWaitsLessThanOneFOneB) {
  for (int p : {2, 4, 8}) {
    for (int m : {2 * p, 4 * p}) {
      for (const parallel::PipelineCosts& block :
           {parallel::PipelineCosts{1.7, 1.2, 1.0}, parallel::PipelineCosts{1, 2, 0.5}}) {
        std::vector<parallel::PipelineCosts> stages(p, block);
        stages.back().forward += 2 * block.forward;
        const parallel::PipelineSimulation zb = parallel::simulate_pipeline(
            parallel::make_pipeline_table(S::kZeroBubbleH1, p, 1, m, stages), std::span(stages));
        const parallel::PipelineSimulation one = parallel::simulate_pipeline(
            parallel::make_pipeline_table(S::k1F1B, p, 1, m), std::span(stages));
        EXPECT_LT(zb.bubble, one.bubble) << "p=" << p << " m=" << m << " forward " << block.forward;
      }
    }
  }
}

TEST(PipelineSchedule, EachRankRunsOnlyItsStagesWithAReceiveForEverySend) {
  const parallel::PipelineTable t = parallel::make_pipeline_table(S::kInterleaved1F1B, 2, 2, 4);
  for (int r = 0; r < t.ranks; ++r) {
    for (const parallel::PipelineAction& a : t.actions[r])
      EXPECT_EQ(t.rank_of(a.stage), r) << parallel::to_string(a);
  }
  EXPECT_EQ(t.actions[0].front(), (parallel::PipelineAction{Kind::kForward, 0, 0}));
  EXPECT_EQ(t.actions[1].front(), (parallel::PipelineAction{Kind::kRecvActivation, 1, 0}));
}

TEST(PipelineSchedule, AReceiveBeforeTheSendItWaitsForIsANamedDeadlock) {
  parallel::PipelineTable t = parallel::make_pipeline_table(S::k1F1B, 2, 1, 2);
  auto& rank0 = t.actions[0];
  // Rank 0 waits for the gradient of micro-batch 0 before sending it its activation.
  auto recv =
      std::find(rank0.begin(), rank0.end(), parallel::PipelineAction{Kind::kRecvGradient, 0, 0});
  ASSERT_NE(recv, rank0.end());
  std::rotate(rank0.begin(), recv, recv + 1);
  expect_error([&] { parallel::simulate_pipeline(t); },
               {"1f1b", "deadlock", "rank 0 waits in recvG(s0,m0) (action 0)",
                "rank 1 waits in recvA(s1,m0) (action 0)"});
}

TEST(PipelineSchedule, ABackwardBeforeItsForwardIsRejected) {
  parallel::PipelineTable t = parallel::make_pipeline_table(S::kGPipe, 1, 1, 2);
  std::swap(t.actions[0][0], t.actions[0][2]);  // B(s0,m0) first
  expect_error([&] { parallel::simulate_pipeline(t); },
               {"rank 0 runs B(s0,m0) (action 0) before its forward has not run"});
  parallel::PipelineTable lost = parallel::make_pipeline_table(S::k1F1B, 2, 1, 2);
  lost.actions[0].pop_back();
  expect_error([&] { parallel::simulate_pipeline(lost); }, {"rank 0 must run either B(s0,m1)"});
  parallel::PipelineTable past = parallel::make_pipeline_table(S::k1F1B, 2, 1, 2);
  past.actions[1].push_back({Kind::kSendActivation, 1, 0});
  expect_error([&] { parallel::simulate_pipeline(past); },
               {"rank 1 has sendA(s1,m0), a message past the end"});
}

TEST(PipelineSchedule, CountsASchedulesCannotRunAreClearErrors) {
  expect_error([] { parallel::make_pipeline_table(S::kInterleaved1F1B, 4, 2, 6); },
               {"train.grad_accum = 6", "multiple", "mesh.pp = 4"});
  expect_error([] { parallel::make_pipeline_table(S::kInterleaved1F1B, 4, 1, 8); },
               {"mesh.pp_virtual"});
  expect_error([] { parallel::make_pipeline_table(S::k1F1B, 4, 2, 8); }, {"1f1b", "interleaved"});
  expect_error([] { parallel::make_pipeline_table(S::kZeroBubbleH1, 2, 1, 0); },
               {"train.grad_accum = 0"});
  expect_error([] { enum_from_name<S>("zbv", "mesh.pp_schedule"); },
               {"mesh.pp_schedule must be \"gpipe\", \"1f1b\", \"interleaved\" or \"zb-h1\", got "
                "\"zbv\""});
  EXPECT_EQ(enum_from_name<S>("zb-h1", "mesh.pp_schedule"), S::kZeroBubbleH1);
}

}  // namespace
}  // namespace tessera::dist
