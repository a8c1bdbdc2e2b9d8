// The dry run against the engine and the planner: every rank's stages follow the mesh and the
// split, its memory is the planner's for the same layout, the memory model's activations are a
// real model's allocation, and a mesh or schedule that cannot run is an error before anything
// starts.
#include "tessera/train/dry_run.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <initializer_list>
#include <string>

#include "tessera/comm/single_communicator.h"
#include "tessera/model/flops.h"
#include "tessera/model/transformer.h"
#include "tessera/plan/cost_model.h"
#include "tessera/train/train_state.h"
#include "tests/expect_error.h"
#include "tests/plan/test_accelerator.h"

namespace tessera::train {
namespace {

RunConfig run_with(std::initializer_list<std::string> assignments) {
  Config config(run_config_schema());
  for (const char* a :
       {"model.vocab_size=64", "model.n_layer=6", "model.n_head=4", "model.d_model=32",
        "model.max_seq=16", "train.seq_len=16", "train.batch_size=4"}) {
    config.set_override(a);
  }
  for (const std::string& a : assignments) config.set_override(a);
  return run_config_from(config);
}

TEST(DryRun, EveryRankHoldsTheStagesOfItsPipelineCoordinate) {
  const RunConfig run = run_with({"mesh.dp=2", "mesh.tp=2", "mesh.pp=3", "train.grad_accum=6"});
  const DryRun plan = dry_run(run, 12);
  ASSERT_EQ(plan.ranks.size(), 12u);
  EXPECT_EQ(plan.layouts_checked, 3 * 2);
  // The balanced split of 6 blocks whose tied head costs 64 x 32 / (12 x 32 x 32) of a block.
  const std::vector<std::pair<int64_t, int64_t>> blocks = {{0, 2}, {2, 4}, {4, 6}};
  for (const DryRunRank& r : plan.ranks) {
    ASSERT_EQ(r.stages.size(), 1u);
    EXPECT_EQ(r.stages[0].block_begin, blocks[r.coords.pp].first) << r.rank;
    EXPECT_EQ(r.stages[0].block_end, blocks[r.coords.pp].second) << r.rank;
    EXPECT_EQ(r.stages[0].tp_rank, r.coords.tp);
    // 1F1B keeps pp - stage micro-batches in flight.
    EXPECT_EQ(r.in_flight, 3 - r.coords.pp);
  }
  EXPECT_EQ(plan.fullest, 0);
  EXPECT_NEAR(plan.bubble, 2.0 / 6, 1e-12);
  const std::string report = dry_run_report(run, plan);
  for (const char* part : {"first", "middle", "last", "1f1b", "fullest: rank 0"}) {
    EXPECT_NE(report.find(part), std::string::npos) << report;
  }
}

TEST(DryRun, GivenAndInterleavedSplitsReachTheirRanks) {
  const DryRun uneven = dry_run(
      run_with({"mesh.dp=1", "mesh.pp=3", "mesh.pp_layers=1,3,2", "train.grad_accum=3"}), 3);
  EXPECT_EQ(uneven.ranks[1].stages[0].block_begin, 1);
  EXPECT_EQ(uneven.ranks[1].stages[0].block_end, 4);
  EXPECT_GT(uneven.ranks[1].parameters, uneven.ranks[2].parameters - 64 * 32);

  const DryRun interleaved =
      dry_run(run_with({"mesh.pp=2", "mesh.pp_virtual=3", "mesh.pp_schedule=interleaved",
                        "train.grad_accum=4"}),
              2);
  const std::vector<model::Sharding>& stages = interleaved.ranks[1].stages;
  ASSERT_EQ(stages.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(stages[k].block_begin, 1 + 2 * k);  // stages 1, 3 and 5 of six one-block stages
    EXPECT_EQ(stages[k].block_end, 2 + 2 * k);
  }
  EXPECT_NEAR(interleaved.bubble, 1.0 / (3 * 4), 1e-12);
}

// One memory function: the dry run's fullest rank is what `tessera plan --layout` reports for
// the same layout, field by field.
TEST(DryRun, MemoryIsThePlannersForTheSameLayout) {
  for (const char* precision : {"f32", "bf16"}) {
    for (const char* zero : {"0", "1"}) {
      SCOPED_TRACE(fmt::format("{}, zero {}", precision, zero));
      const RunConfig run =
          run_with({"mesh.dp=2", "mesh.tp=2", "mesh.pp=3", "train.grad_accum=6",
                    std::string("train.precision=") + precision, std::string("train.zero=") + zero,
                    "train.recompute=selective", "mesh.sequence_parallel=true"});
      const DryRun plan = dry_run(run, 12);
      const plan::Layout layout{.dp = 2,
                                .tp = 2,
                                .pp = 3,
                                .zero = int(run.train.zero),
                                .micro_batch = 2,
                                .recompute = model::Recompute::kSelective,
                                .sequence_parallel = true};
      const plan::Estimate e = plan::estimate(run.model, plan::test_gpu(), layout,
                                              {.global_batch = 4 * 6,
                                               .seq_len = 16,
                                               .tokens = 1e9,
                                               .precision = run.train.precision,
                                               .reliability = {}});
      ASSERT_TRUE(e.invalid.empty()) << e.invalid;
      const parallel::RankMemory& m = plan.ranks[plan.fullest].memory;
      EXPECT_EQ(m.params, e.memory.params);
      EXPECT_EQ(m.grads, e.memory.grads);
      EXPECT_EQ(m.optimizer, e.memory.optimizer);
      EXPECT_EQ(m.activations, e.memory.activations);
    }
  }
}

// The memory model's activations are what a Transformer allocates: a whole model on one rank,
// where each further micro-batch in flight adds its blocks' saved activations and its input, and
// pipeline stages holding several.
TEST(DryRun, MemoryModelCountsWhatTheEngineAllocates) {
  const RunConfig run = run_with({"train.precision=bf16"});
  const model::Transformer engine(run.model, 4, 16, true, {.precision = model::Precision::kBf16});
  parallel::MemoryModel memory(run.model);
  const parallel::TrainingShape shape{0, 1,
                                      model::ActivationOptions{.max_batch = 4,
                                                               .max_seq = 16,
                                                               .training = true,
                                                               .precision = model::Precision::kBf16,
                                                               .threads = omp_get_max_threads()}};
  const parallel::RankMemory one = memory.rank({{model::Sharding{}}, {1}}, shape);
  EXPECT_EQ(one.activations, double(engine.activation_bytes_total()));
  const double parameters = double(engine.layout().total());
  EXPECT_EQ(one.params + one.grads + one.optimizer, 16 * parameters);
  const parallel::RankMemory three = memory.rank({{model::Sharding{}}, {3}}, shape);
  EXPECT_EQ(three.activations - one.activations,
            2 * double(6 * engine.saved_activation_bytes_per_layer() + 4 * 4 * 16 * 32));
  // A pipeline stage built for three micro-batches in flight allocates what the rank is counted,
  // with its backward whole or split (zero-bubble).
  parallel::TrainingShape split_shape = shape;
  split_shape.activations.split_backward = true;
  for (const auto& [begin, end] : {std::pair{0, 2}, std::pair{2, 5}, std::pair{5, 6}}) {
    model::ModelParallel stage;
    stage.sharding = {.block_begin = begin, .block_end = end};
    for (bool split : {false, true}) {
      const model::Transformer held(run.model, 4, 16, true,
                                    {.precision = model::Precision::kBf16,
                                     .parallel = &stage,
                                     .in_flight = 3,
                                     .split_backward = split});
      EXPECT_EQ(memory.rank({{stage.sharding}, {3}}, split ? split_shape : shape).activations,
                double(held.activation_bytes_total()))
          << begin << (split ? ", split backward" : "");
    }
  }
}

// A LoRA run: the memory model counts the frozen model and the adapters' state as the training
// state holds them, and the planner's step the FLOPs of frozen weights with no weight gradients.
TEST(DryRun, LoraMemoryAndFlopsAreTheEnginesOwn) {
  double frozen_params[2];
  for (int q8_0 = 0; q8_0 < 2; ++q8_0) {
    const RunConfig run =
        run_with({"train.lora_rank=4", "train.lora_targets=attention,mlp",
                  std::string("train.lora_quantize=") + (q8_0 ? "q8_0" : "none")});
    comm::SingleCommunicator alone;
    const comm::Mesh mesh(alone, {});
    TrainState state(kernels::kCpuContext, run.model, run.train, mesh, {}, int64_t{1} << 20);
    parallel::MemoryModel memory(run.model);
    const parallel::TrainingShape shape{
        0, 1, model::ActivationOptions{.max_batch = 4, .max_seq = 16, .training = true}};
    const parallel::RankMemory planned = memory.rank({{model::Sharding{}}, {1}}, shape);
    const MemoryReport held = state.memory();
    EXPECT_EQ(planned.params, double(held.params));
    EXPECT_EQ(planned.grads, double(held.grads));
    EXPECT_EQ(planned.optimizer, double(held.optimizer));
    const model::ModelLayout& layout = state.layout();
    const double adapters = double(layout.params.total() - layout.adapters_begin);
    EXPECT_EQ(planned.grads, 4 * adapters);
    EXPECT_EQ(planned.optimizer, 8 * adapters);
    frozen_params[q8_0] = planned.params;
  }
  EXPECT_LT(frozen_params[1], frozen_params[0]);

  const RunConfig run = run_with({"train.lora_rank=4", "train.lora_targets=attention,mlp"});
  const double adapters = double(model::model_layout(run.model).params.total() -
                                 model::model_layout(run.model).adapters_begin);
  // Per token: 4 x the frozen matmul weights, 6 x the adapters' and the attention's 12 L T d.
  model::ModelConfig plain = run.model;
  plain.lora = {};
  const model::MatmulWeights w = model::matmul_weights(model::model_spec(run.model));
  const double L = double(run.model.n_layer), attention = 12 * L * 16 * 32;
  EXPECT_DOUBLE_EQ(w.adapters, adapters / L);
  const model::FlopsPerToken lora = model::flops_per_token(run.model, 16, model::Recompute::kNone);
  const model::FlopsPerToken full = model::flops_per_token(plain, 16, model::Recompute::kNone);
  EXPECT_DOUBLE_EQ(full.model, 6 * (w.block * L + w.head) + attention);
  EXPECT_DOUBLE_EQ(lora.model, 4 * (w.block * L + w.head) + 6 * adapters + attention);
  EXPECT_DOUBLE_EQ(lora.hardware, lora.model + 2 * w.adapters_down * L);
}

// A mixture's adapters sit after its experts in the layout: each expert-parallel rank holds the
// attention's whole, as it holds the rest of the dense model, and its experts' own; the plan
// counts each once per replica.
TEST(DryRun, AdaptersOfAMixtureAreHeldOncePerReplica) {
  const DryRun plan =
      dry_run(run_with({"model.arch=llama", "model.moe_experts=4", "model.moe_top_k=2",
                        "model.tie_embeddings=false", "train.lora_rank=4",
                        "train.lora_targets=attention", "mesh.dp=2", "mesh.ep=2"}),
              2);
  EXPECT_EQ(plan.ranks.size(), 2u);
}

TEST(DryRun, AMeshOrScheduleThatCannotRunIsAnError) {
  const RunConfig run = run_with({"mesh.dp=2", "mesh.pp=2", "train.grad_accum=2"});
  testing::expect_error([&] { dry_run(run, 8); }, {"mesh.dp x mesh.cp x mesh.tp x mesh.pp", "8"});
  testing::expect_error(
      [&] {
        run_with({"mesh.pp=2", "mesh.pp_virtual=3", "mesh.pp_schedule=interleaved",
                  "train.grad_accum=3"});
      },
      {"train.grad_accum", "multiple"});
  testing::expect_error(
      [&] {
        run_with({"mesh.pp=3", "mesh.pp_layers=1,2,2"});
      },
      {"mesh.pp_layers"});
  testing::expect_error(
      [&] {
        run_with({"mesh.pp=2", "mesh.pp_layers=3,x"});
      },
      {"mesh.pp_layers", "'x'"});
  testing::expect_error(
      [&] {
        run_with({"mesh.pp=2", "mesh.pp_schedule=zigzag"});
      },
      {"zigzag", "1f1b"});
  testing::expect_error([&] { run_with({"mesh.pp_virtual=2"}); }, {"mesh.pp_virtual", "mesh.pp"});
}

}  // namespace
}  // namespace tessera::train
