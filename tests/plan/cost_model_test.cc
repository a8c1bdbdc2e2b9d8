// The planner's arithmetic against closed forms: Megatron's FLOP counts, the ZeRO memory
// formulas over the layout's ranks with the engine's own parameter layout and activation
// allocation, the pipeline bubble, and the layout string's round trip.
#include "tessera/plan/cost_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <set>

#include "tessera/model/activation_memory.h"
#include "tessera/model/model_layout.h"
#include "tessera/plan/search.h"
#include "tessera/plan/step_work.h"
#include "tests/expect_error.h"
#include "tests/plan/test_accelerator.h"

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

TEST(CostModel, FlopsMatchMegatronsFormula) {
  // Narayanan et al. 2021, Eq. 3 per token: 96 l h^2 (1 + s / 6h) + 6 V h with recomputation of
  // the forward, 72 l h^2 (...) + 6 V h without; biases and norms are not counted.
  const model::ModelConfig c = gpt_1t();
  const double l = 128, h = 25600, s = 2048, V = 51200;
  const double blocks = 72 * l * h * h * (1 + s / (6 * h)), head = 6 * V * h;
  const model::FlopsPerToken full = model::flops_per_token(c, 2048, model::Recompute::kFull);
  const double bias_share = 6 * l * 9 * h / (blocks + head);  // fc, qkv and proj biases
  EXPECT_NEAR(full.model / (blocks + head), 1.0, bias_share + 1e-9);
  EXPECT_NEAR(full.hardware / (blocks * 4 / 3 + head), 1.0, bias_share + 1e-9);
  const model::FlopsPerToken selective =
      model::flops_per_token(c, 2048, model::Recompute::kSelective);
  EXPECT_DOUBLE_EQ(selective.hardware - selective.model, 4 * l * s * h);
  EXPECT_DOUBLE_EQ(model::flops_per_token(c, 2048, model::Recompute::kNone).hardware, full.model);
}

TEST(CostModel, MemoryFollowsZeroOverTheLayoutsRanks) {
  const model::ModelConfig c = gpt_1t();
  const Accelerator a = test_gpu();
  const Workload w{64, 2048, 1e9};
  // The parameters of tensor-parallel rank 0 of the first of 16 pipeline stages (8 blocks each,
  // the embedding with them), which holds the most micro-batches in flight.
  const double per_chip =
      double(model::model_layout(c, {.tp = 8, .block_begin = 0, .block_end = 8}).params.total());
  for (int zero = 0; zero <= 3; ++zero) {
    const Layout l{.dp = 8, .tp = 8, .pp = 16, .zero = zero, .micro_batch = 1};
    const Estimate e = estimate(c, a, l, w);
    ASSERT_TRUE(e.invalid.empty()) << e.invalid;
    EXPECT_DOUBLE_EQ(e.memory.params, 2 * per_chip / (zero >= 3 ? 8 : 1));
    EXPECT_DOUBLE_EQ(e.memory.grads, 2 * per_chip / (zero >= 2 ? 8 : 1));
    EXPECT_DOUBLE_EQ(e.memory.optimizer, 12 * per_chip / (zero >= 1 ? 8 : 1));
  }
}

// Experts are replicated over tp and split over ep; ZeRO shards them over dp / ep and the dense
// parameters over dp, in the precision of the workload.
TEST(CostModel, ExpertsFollowZeroOverTheirOwnReplicas) {
  model::ModelConfig c;
  c.arch = model::Architecture::kLlama;
  c.vocab_size = 32000;
  c.n_layer = 4;
  c.n_head = 8;
  c.d_model = 512;
  c.max_seq = 1024;
  c.tie_embeddings = false;
  c.moe.n_experts = 8;
  c.moe.top_k = 2;
  const model::ModelLayout local = model::model_layout(c, {.tp = 2, .ep = 4});
  const double dense = double(local.experts_begin);
  const double experts = double(local.params.total() - local.experts_begin);
  const Layout l{.dp = 8, .tp = 2, .ep = 4, .zero = 1, .micro_batch = 1};
  const Estimate e = estimate(c, test_gpu(), l, {8, 1024, 1e9, model::Precision::kF32});
  ASSERT_TRUE(e.invalid.empty()) << e.invalid;
  EXPECT_DOUBLE_EQ(e.memory.params, 4 * (dense + experts));
  EXPECT_DOUBLE_EQ(e.memory.grads, 4 * (dense + experts));
  EXPECT_DOUBLE_EQ(e.memory.optimizer, 8 * (dense / 8 + experts / 2));
}

// Without a pipeline the activations are what the engine allocates for one micro-batch; a
// pipeline's first stage keeps its input and its blocks' saved activations (its last block's
// output, which it only sends on, aside) for each of the pp micro-batches 1F1B holds in flight.
TEST(CostModel, ActivationsAreTheEnginesAllocation) {
  const model::ModelConfig c = gpt_1t();
  const Accelerator a = test_gpu();
  for (bool sp : {false, true}) {
    for (model::Recompute r :
         {model::Recompute::kNone, model::Recompute::kSelective, model::Recompute::kFull}) {
      SCOPED_TRACE(fmt::format("sp {}, recompute {}", sp, enum_name(r)));
      const model::ActivationOptions options{.max_batch = 2,
                                             .max_seq = 2048,
                                             .training = true,
                                             .precision = model::Precision::kBf16,
                                             .recompute = r,
                                             .sequence_parallel = sp};
      const model::ActivationBytes engine = model::activation_bytes(c, {.tp = 8}, options);
      Layout l{.dp = 8, .tp = 8, .micro_batch = 2, .recompute = r, .sequence_parallel = sp};
      EXPECT_EQ(estimate(c, a, l, {64, 2048, 1e9}).memory.activations, double(engine.total));
      l.dp = 1;
      l.pp = 8;
      const model::ActivationBytes first =
          model::activation_bytes(c, {.tp = 8, .block_end = 16}, options);
      EXPECT_EQ(first.per_micro_batch, 16 * engine.saved_per_layer);
      EXPECT_DOUBLE_EQ(estimate(c, a, l, {64, 2048, 1e9}).memory.activations,
                       double(first.total + 7 * first.per_micro_batch));
    }
  }
}

// QK-norm, one part of block_spec, reaches the plan: its gains in the parameters, its saved input
// and statistics in the activations, its elements in the step's work.
TEST(CostModel, QkNormIsPlannedFromItsPart) {
  model::ModelConfig plain;
  plain.arch = model::Architecture::kLlama;
  plain.vocab_size = 32000;
  plain.n_layer = 32;
  plain.n_head = 32;
  plain.n_kv_head = 8;
  plain.d_model = 4096;
  plain.max_seq = 4096;
  plain.tie_embeddings = false;
  model::ModelConfig qk = plain;
  qk.qk_norm = true;
  const Accelerator a = test_gpu();
  const Layout l{.dp = 8, .tp = 8, .micro_batch = 1};
  const Workload w{64, 4096, 1e9};
  const Estimate with = estimate(qk, a, l, w), without = estimate(plain, a, l, w);
  ASSERT_TRUE(with.invalid.empty()) << with.invalid;
  const double head_dim = 128, added_params = 2 * head_dim * 32;  // replicated over tp
  EXPECT_DOUBLE_EQ(with.memory.params - without.memory.params, 2 * added_params);
  EXPECT_GT(with.memory.activations, without.memory.activations);
  const StepShape step{.batch = 1, .seq = 4096};
  // Each token's 32 query and 8 key heads of 128 channels are read and written once more, per
  // block, forward and backward.
  EXPECT_GT(step_elements(qk, step).streamed, step_elements(plain, step).streamed);
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
  EXPECT_NE(estimate(c, a, {.tp = 8}, {1, 1023, 1e9}).invalid.find("1023 tokens over tp=8"),
            std::string::npos);
  EXPECT_EQ(estimate(c, a, {.tp = 8, .sequence_parallel = false}, {1, 1023, 1e9}).invalid, "");
  model::ModelConfig narrow = c;
  narrow.ffn_hidden = 100;
  EXPECT_NE(estimate(narrow, a, {.tp = 8}, {8, 2048, 1e9}).invalid.find("MLP width 100"),
            std::string::npos);
}

// 160 heads split five ways are whole heads, as the engine allows: the search tries every tp that
// divides the heads within the scale-up domain, not only powers of two.
TEST(CostModel, SearchTriesEveryTpThatDividesTheHeads) {
  const model::ModelConfig c = gpt_1t();
  const Workload w{.global_batch = 1200, .seq_len = 2048, .tokens = 1e12};
  const SearchResult found = search_layouts(c, test_gpu(), 1200, w, RankBy::kTime);
  std::set<int64_t> tps;
  for (const Estimate& e : found.ranked) tps.insert(e.layout.tp);
  EXPECT_EQ(tps, (std::set<int64_t>{1, 2, 4, 5, 8})) << fmt::format("{}", fmt::join(tps, ","));
  const Estimate five = estimate(c, test_gpu(), parse_layout("dp=30,tp=5,pp=8,sp=0"), w);
  EXPECT_EQ(five.invalid, "");
  EXPECT_NE(estimate(c, test_gpu(), parse_layout("dp=40,tp=3,pp=10,sp=0"), w).invalid, "");
}

// BLOOM put 70 layers on 12 stages: the engine splits them 6 and 5 (balanced_stage_blocks), and
// the stages with 6 pace the pipeline, 6 / (70 / 12) = 72 / 70 of an even share.
TEST(CostModel, UnevenPipelineSplitsArePacedByTheBusiestStage) {
  model::ModelConfig c = gpt_1t();
  c.n_layer = 70;
  const Workload w{.global_batch = 1536, .seq_len = 2048, .tokens = 1e12};
  const Accelerator a = test_gpu();
  const Estimate e = estimate(c, a, parse_layout("dp=8,tp=8,pp=12,zero=1,mb=1"), w);
  ASSERT_EQ(e.invalid, "");
  const double even_share = e.flops.hardware * double(w.global_batch * w.seq_len) / (8 * 8 * 12) /
                            (a.peak_bf16_flops * e.matmul_efficiency);
  EXPECT_NEAR(e.time.compute / even_share, 72.0 / 70.0, 1e-12);
  const Estimate even = estimate(c, a, parse_layout("dp=12,tp=8,pp=10,zero=1,mb=1"), w);
  ASSERT_EQ(even.invalid, "");
  const double even_compute = e.flops.hardware * double(w.global_batch * w.seq_len) /
                              (12 * 8 * 10) / (a.peak_bf16_flops * even.matmul_efficiency);
  EXPECT_NEAR(even.time.compute / even_compute, 1.0, 1e-12) << "7 layers on each of 10 stages";
  EXPECT_NE(estimate(c, a, parse_layout("dp=1,tp=8,pp=71"), w).invalid, "");
}

// Keeping the blocks' saved f32 state in bf16 halves exactly that state: per block, on each
// micro-batch the rank holds (here one stage of 128 blocks, one micro-batch in flight).
TEST(CostModel, Bf16ActivationsHalveTheSavedF32State) {
  const model::ModelConfig c = gpt_1t();
  Workload w{.global_batch = 8, .seq_len = 2048, .tokens = 1e12};
  const Layout l = parse_layout("dp=1,tp=8,pp=1,zero=1,mb=1,recompute=none,sp=1");
  const Estimate engine = estimate(c, test_gpu(), l, w);
  w.bf16_activations = true;
  const Estimate planned = estimate(c, test_gpu(), l, w);
  const model::ActivationBytes a =
      model::activation_bytes(c, model::Sharding{.tp = 8}, training_shape(l, w).activations);
  ASSERT_GT(a.saved_f32_state_per_layer, 0);
  EXPECT_EQ(engine.memory.activations - planned.memory.activations,
            0.5 * double(a.saved_f32_state_per_layer) * 128);
  w.precision = model::Precision::kF32;
  const double f32_bf16_flag = estimate(c, test_gpu(), l, w).memory.activations;
  w.bf16_activations = false;
  EXPECT_EQ(f32_bf16_flag, estimate(c, test_gpu(), l, w).memory.activations)
      << "f32 training keeps its activations in f32";
}

// Context parallelism splits each sequence over cp ranks: each holds cp times fewer tokens'
// activations and computes on them, and the ranks gather the keys and values of the whole sequence
// for every layer; the search tries it only where a rank keeps at least 8,192 tokens.
TEST(CostModel, ContextParallelismSplitsTheSequence) {
  model::ModelConfig c = gpt_1t();
  c.max_seq = 65536;
  // Enough micro-batches that both layouts keep the pipeline's full pp in flight.
  const Workload w{.global_batch = 256, .seq_len = 65536, .tokens = 1e12};
  const Accelerator a = test_gpu();
  const Estimate whole = estimate(c, a, parse_layout("dp=8,tp=8,pp=16,zero=1,recompute=full"), w);
  const Estimate split =
      estimate(c, a, parse_layout("dp=2,tp=8,pp=16,zero=1,recompute=full,cp=4"), w);
  ASSERT_EQ(whole.invalid, "");
  ASSERT_EQ(split.invalid, "");
  EXPECT_EQ(split.layout.chips(), whole.layout.chips());
  EXPECT_EQ(whole.time.context_parallel, 0);
  EXPECT_GT(split.time.context_parallel, 0);
  EXPECT_NEAR(split.time.compute / whole.time.compute, 1.0, 1e-12) << "the same work per chip";
  EXPECT_LT(split.memory.activations, whole.memory.activations / 3);
  EXPECT_NE(estimate(c, a, parse_layout("dp=2,tp=8,pp=16,cp=3"), w).invalid.find("2 x cp"),
            std::string::npos);
  std::set<int64_t> cps;
  for (const Estimate& e : search_layouts(c, a, 2048, w, RankBy::kTime).ranked) {
    cps.insert(e.layout.cp);
  }
  EXPECT_TRUE(cps.contains(4)) << fmt::format("{}", fmt::join(cps, ","));
  EXPECT_FALSE(cps.contains(16)) << "4,096 tokens per rank";
}

// Recomputing half the blocks (Megatron-LM's --recompute-num-layers): the FLOPs, the activations
// and the tensor-parallel traffic fall between keeping every block and recomputing every one.
TEST(CostModel, ARecomputedShareOfTheBlocksLiesBetweenNoneAndAll) {
  const model::ModelConfig c = gpt_1t();
  const Workload w{.global_batch = 1536, .seq_len = 2048, .tokens = 1e12};
  const Accelerator a = test_gpu();
  auto at = [&](const char* layout) {
    const Estimate e = estimate(c, a, parse_layout(layout), w);
    EXPECT_EQ(e.invalid, "") << layout;
    return e;
  };
  const Estimate none = at("dp=8,tp=8,pp=16,zero=1,mb=1,recompute=none");
  const Estimate half = at("dp=8,tp=8,pp=16,zero=1,mb=1,recompute=full,rf=0.5");
  const Estimate full = at("dp=8,tp=8,pp=16,zero=1,mb=1,recompute=full");
  EXPECT_NEAR(half.flops.hardware, (none.flops.hardware + full.flops.hardware) / 2, 1e-6);
  EXPECT_EQ(half.flops.model, full.flops.model);
  EXPECT_NEAR(half.memory.activations, (none.memory.activations + full.memory.activations) / 2,
              1.0);
  EXPECT_GT(half.time.tensor_parallel, none.time.tensor_parallel);
  EXPECT_LT(half.time.tensor_parallel, full.time.tensor_parallel);
  EXPECT_NE(estimate(c, a, parse_layout("dp=8,tp=8,pp=16,recompute=none,rf=0.5"), w)
                .invalid.find("recompute=selective or full"),
            std::string::npos);
  std::set<double> shares;
  for (const Estimate& e : search_layouts(c, a, 1024, w, RankBy::kTime).ranked) {
    shares.insert(e.layout.recompute_fraction);
  }
  EXPECT_EQ(shares, (std::set<double>{0.5, 1.0}));
}

TEST(Layout, StringRoundTripsAndBadPairsAreErrors) {
  const Layout l{.dp = 6,
                 .tp = 8,
                 .pp = 64,
                 .ep = 1,
                 .zero = 2,
                 .micro_batch = 4,
                 .recompute = model::Recompute::kFull,
                 .vpp = 2,
                 .sequence_parallel = false};
  EXPECT_EQ(l.str(), "dp=6,tp=8,pp=64,ep=1,zero=2,mb=4,recompute=full,vpp=2,sp=0");
  EXPECT_EQ(parse_layout(l.str()).str(), l.str());
  EXPECT_EQ(parse_layout("dp=4").str(), Layout{.dp = 4}.str());
  EXPECT_EQ(parse_layout("dp=4,cp=16").str(),
            "dp=4,tp=1,pp=1,ep=1,zero=1,mb=1,recompute=selective,vpp=1,sp=1,cp=16");
  EXPECT_EQ(parse_layout("recompute=full,rf=0.25").str(),
            "dp=1,tp=1,pp=1,ep=1,zero=1,mb=1,recompute=full,vpp=1,sp=1,rf=0.25");
  testing::expect_error([] { parse_layout("rf=0"); }, {"rf=0", "(0, 1]"});
  testing::expect_error([] { parse_layout("rf=1.5"); }, {"rf=1.5", "(0, 1]"});
  testing::expect_error([] { parse_layout("dp=4,tp"); }, {"'tp' is not key=value"});
  testing::expect_error([] { parse_layout("dp=0"); }, {"dp=0 is not a positive integer"});
  testing::expect_error([] { parse_layout("zero=4"); }, {"zero=4 must be 0, 1, 2 or 3"});
  testing::expect_error([] { parse_layout("sp=yes"); }, {"sp=yes must be 0 or 1"});
  testing::expect_error([] { parse_layout("recompute=some"); },
                        {"--layout: recompute must be", "\"some\""});
}

}  // namespace
}  // namespace tessera::plan
