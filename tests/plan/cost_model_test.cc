// The planner's arithmetic against closed forms: Megatron's FLOP counts, the ZeRO memory
// formulas over the layout's ranks, the pipeline bubble, and the layout string's round trip.
#include "tessera/plan/cost_model.h"

#include <gtest/gtest.h>

#include "tests/expect_error.h"

namespace tessera::plan {
namespace {

model::ModelConfig gpt_1t() {
  model::ModelConfig c;
  c.vocab_size = 51200;
  c.n_layer = 128;
  c.n_head = 160;
  c.d_model = 25600;
  c.max_seq = 2048;
  return c;
}

Accelerator test_gpu() {
  Accelerator a;
  a.name = "test";
  a.kind = "gpu";
  a.peak_bf16_flops = 1e15;
  a.hbm_bytes = 1e12;
  a.hbm_bandwidth = 3e12;
  a.scaleup_domain = 8;
  a.scaleup_bandwidth = 4e11;
  a.scaleout_bandwidth = 5e10;
  return a;
}

TEST(CostModel, FlopsMatchMegatronsFormula) {
  // Narayanan et al. 2021, Eq. 3 per token: 96 l h^2 (1 + s / 6h) + 6 V h with recomputation of
  // the forward, 72 l h^2 (...) + 6 V h without; biases and norms are not counted.
  const model::ModelConfig c = gpt_1t();
  const double l = 128, h = 25600, s = 2048, V = 51200;
  const double blocks = 72 * l * h * h * (1 + s / (6 * h)), head = 6 * V * h;
  const FlopsPerToken full = flops_per_token(c, 2048, model::Recompute::kFull);
  const double bias_share = 6 * l * 9 * h / (blocks + head);  // fc, qkv and proj biases
  EXPECT_NEAR(full.model / (blocks + head), 1.0, bias_share + 1e-9);
  EXPECT_NEAR(full.hardware / (blocks * 4 / 3 + head), 1.0, bias_share + 1e-9);
  const FlopsPerToken selective = flops_per_token(c, 2048, model::Recompute::kSelective);
  EXPECT_DOUBLE_EQ(selective.hardware - selective.model, 4 * l * s * h);
  EXPECT_DOUBLE_EQ(flops_per_token(c, 2048, model::Recompute::kNone).hardware, full.model);
}

TEST(CostModel, MemoryFollowsZeroOverTheLayoutsRanks) {
  const model::ModelConfig c = gpt_1t();
  const Accelerator a = test_gpu();
  const Workload w{64, 2048, 1e9};
  const double psi = split_parameters(c).dense;
  for (int zero = 0; zero <= 3; ++zero) {
    const Layout l{.dp = 8, .tp = 8, .pp = 16, .zero = zero, .micro_batch = 1};
    const Estimate e = estimate(c, a, l, w);
    ASSERT_TRUE(e.invalid.empty()) << e.invalid;
    const double per_chip = psi / (8 * 16);
    EXPECT_DOUBLE_EQ(e.memory.params, 2 * per_chip / (zero >= 3 ? 8 : 1));
    EXPECT_DOUBLE_EQ(e.memory.grads, 2 * per_chip / (zero >= 2 ? 8 : 1));
    EXPECT_DOUBLE_EQ(e.memory.optimizer, 12 * per_chip / (zero >= 1 ? 8 : 1));
  }
}

TEST(CostModel, PipelineBubbleShrinksWithMicroBatchesAndInterleaving) {
  const model::ModelConfig c = gpt_1t();
  const Accelerator a = test_gpu();
  const Layout l{.dp = 1, .tp = 8, .pp = 64, .micro_batch = 1};
  const Estimate few = estimate(c, a, l, {64, 2048, 1e9});
  const Estimate many = estimate(c, a, l, {512, 2048, 1e9});
  EXPECT_DOUBLE_EQ(few.time.bubble / few.time.compute, 63.0 / 64);
  EXPECT_DOUBLE_EQ(many.time.bubble / many.time.compute, 63.0 / 512);
  Layout interleaved = l;
  interleaved.vpp = 2;
  const Estimate e = estimate(c, a, interleaved, {512, 2048, 1e9});
  EXPECT_DOUBLE_EQ(e.time.bubble / e.time.compute, 63.0 / 1024);
}

TEST(CostModel, LayoutsThatCannotRunSayWhy) {
  const model::ModelConfig c = gpt_1t();
  const Accelerator a = test_gpu();
  EXPECT_NE(estimate(c, a, {.dp = 1, .tp = 3}, {8, 2048, 1e9}).invalid.find("does not divide 160"),
            std::string::npos);
  EXPECT_NE(estimate(c, a, {.dp = 3}, {8, 2048, 1e9}).invalid.find("global batch of 8"),
            std::string::npos);
  EXPECT_NE(estimate(c, a, {.dp = 2, .ep = 2}, {8, 2048, 1e9}).invalid.find("MoE"),
            std::string::npos);
}

TEST(Layout, StringRoundTripsAndBadPairsAreErrors) {
  const Layout l{.dp = 6,
                 .tp = 8,
                 .pp = 64,
                 .ep = 1,
                 .zero = 2,
                 .micro_batch = 4,
                 .recompute = model::Recompute::kFull,
                 .vpp = 2};
  EXPECT_EQ(parse_layout(l.str()).str(), l.str());
  EXPECT_EQ(parse_layout("dp=4").str(), Layout{.dp = 4}.str());
  testing::expect_error([] { parse_layout("dp=4,tp"); }, {"'tp' is not key=value"});
  testing::expect_error([] { parse_layout("dp=0"); }, {"dp=0 is not a positive integer"});
  testing::expect_error([] { parse_layout("zero=4"); }, {"zero=4 must be 0, 1, 2 or 3"});
  testing::expect_error([] { parse_layout("recompute=some"); }, {"train.recompute"});
}

}  // namespace
}  // namespace tessera::plan
