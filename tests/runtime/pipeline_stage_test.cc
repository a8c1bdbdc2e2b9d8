// Pipeline stages run in one process: the stages of a split, each a PipelineStage running a
// Transformer over its blocks with several micro-batches in flight, handing activations forward and
// gradients back, give the whole model's losses and gradients, for tied and untied heads, a mixture
// of experts and uneven splits, with the backward whole or split into its input and weight
// gradients (zero-bubble) under every recomputation; and each slot costs what the memory model
// says.
#include "tessera/runtime/pipeline_stage.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"
#include "tests/expect_error.h"
#include "tests/model/small_configs.h"

namespace tessera::model {
namespace {

constexpr int64_t kB = 2, kT = 8, kMicroBatches = 3;

ModelConfig six_blocks(ModelConfig c) {
  c.n_layer = 6;
  return c;
}

std::vector<int32_t> tokens(const ModelConfig& c, uint64_t seed) {
  const CounterRng rng(seed, 0);
  std::vector<int32_t> t(kMicroBatches * kB * (kT + 1));
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(rng.below(i, uint64_t(c.vocab_size)));
  return t;
}

// Each parameter's gradient by name, summed over the models that hold it (a tied embedding's
// two copies).
using Gradients = std::map<std::string, std::vector<double>>;
void add_gradients(Transformer& m, Gradients& out) {
  const std::span<float> g = m.grads();
  for (const ParamInfo& e : m.layout().entries()) {
    std::vector<double>& sum = out[e.name];
    sum.resize(e.shape.numel(), 0.0);
    for (int64_t i = 0; i < e.shape.numel(); ++i) sum[i] += g[e.offset + i];
  }
}

struct Steps {
  std::vector<float> losses;
  Gradients gradients;
};

// How the stages are built and run.
struct StageRun {
  Precision precision = Precision::kF32;
  Recompute recompute = Recompute::kNone;
  // Each backward as its input gradient, in GPipe's order, and every weight gradient after them
  // all, first micro-batch first.
  bool split_backward = false;
};

Steps whole_model(const ModelConfig& c, Precision precision, const std::vector<int32_t>& data) {
  Transformer m(c, kB, kT, true, {.precision = precision});
  m.init_weights(7);
  m.zero_grad();
  runtime::TrainStep step(m);
  Steps run;
  for (int64_t mb = 0; mb < kMicroBatches; ++mb) {
    const int32_t* x = data.data() + mb * kB * (kT + 1);
    std::vector<int32_t> in, out;
    for (int64_t b = 0; b < kB; ++b) {
      in.insert(in.end(), x + b * (kT + 1), x + b * (kT + 1) + kT);
      out.insert(out.end(), x + b * (kT + 1) + 1, x + (b + 1) * (kT + 1));
    }
    run.losses.push_back(
        step.forward_backward(in.data(), out.data(), kB, kT, 1.0f / kMicroBatches));
  }
  add_gradients(m, run.gradients);
  return run;
}

// GPipe's order over the stages: every micro-batch's forward through all of them, then the
// backwards, last micro-batch first, so that each slot is used out of order.
Steps staged(const ModelConfig& c, const StageRun& how, const std::vector<int64_t>& blocks,
             const std::vector<int32_t>& data) {
  std::vector<ModelParallel> parallel(blocks.size());
  std::vector<std::unique_ptr<Transformer>> models;
  std::vector<std::unique_ptr<runtime::PipelineStage>> stages;
  int64_t begin = 0;
  for (size_t s = 0; s < blocks.size(); ++s) {
    parallel[s].sharding = {.block_begin = begin, .block_end = begin + blocks[s]};
    begin += blocks[s];
    models.push_back(
        std::make_unique<Transformer>(c, kB, kT, true,
                                      ModelOptions{.precision = how.precision,
                                                   .recompute = how.recompute,
                                                   .parallel = &parallel[s],
                                                   .in_flight = kMicroBatches,
                                                   .split_backward = how.split_backward}));
    models.back()->init_weights(7);
    models.back()->zero_grad();
    stages.push_back(std::make_unique<runtime::PipelineStage>(*models.back()));
  }
  const int64_t rows = kB * kT * c.d_model;
  std::vector<std::vector<int32_t>> in(kMicroBatches), out(kMicroBatches);
  Steps run;
  for (int64_t mb = 0; mb < kMicroBatches; ++mb) {
    const int32_t* x = data.data() + mb * kB * (kT + 1);
    for (int64_t b = 0; b < kB; ++b) {
      in[mb].insert(in[mb].end(), x + b * (kT + 1), x + b * (kT + 1) + kT);
      out[mb].insert(out[mb].end(), x + b * (kT + 1) + 1, x + (b + 1) * (kT + 1));
    }
    for (size_t s = 0; s < stages.size(); ++s) {
      if (s > 0) {
        std::copy_n(stages[s - 1]->output(), rows, stages[s]->input(mb));
      }
      const float loss =
          stages[s]->forward(mb, in[mb].data(), out[mb].data(), kB, kT, 1.0f / kMicroBatches);
      if (s + 1 == stages.size()) run.losses.push_back(loss);
    }
  }
  for (int64_t mb = kMicroBatches - 1; mb >= 0; --mb) {
    for (size_t s = stages.size(); s-- > 0;) {
      if (s + 1 < stages.size()) {
        std::copy_n(stages[s + 1]->gradient(), rows, stages[s]->gradient());
      }
      if (how.split_backward) {
        stages[s]->backward_input(mb, in[mb].data());
      } else {
        stages[s]->backward(mb, in[mb].data());
      }
    }
  }
  if (how.split_backward) {
    for (int64_t mb = 0; mb < kMicroBatches; ++mb) {
      for (auto& stage : stages) stage->backward_weight(mb);
    }
  }
  for (auto& m : models) add_gradients(*m, run.gradients);
  return run;
}

void expect_same(const Steps& whole, const Steps& staged, double tolerance) {
  ASSERT_EQ(whole.losses.size(), staged.losses.size());
  for (size_t i = 0; i < whole.losses.size(); ++i) {
    EXPECT_NEAR(staged.losses[i], whole.losses[i], tolerance * std::abs(whole.losses[i])) << i;
  }
  ASSERT_EQ(whole.gradients.size(), staged.gradients.size());
  for (const auto& [name, g] : whole.gradients) {
    const std::vector<double>& h = staged.gradients.at(name);
    double norm = 0, diff = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      norm += g[i] * g[i];
      diff += (g[i] - h[i]) * (g[i] - h[i]);
    }
    EXPECT_LE(std::sqrt(diff), tolerance * std::sqrt(norm) + 1e-12) << name;
  }
}

// Every split with the backward whole, and one with it split into input and weight gradients
// under each recomputation.
TEST(PipelineStage, StagesInFlightGiveTheWholeModelsLossesAndGradients) {
  const SmallConfigs small = small_configs(kT);
  for (const ModelConfig& c :
       {six_blocks(small.gpt2), six_blocks(small.llama), six_blocks(small.moe)}) {
    const std::vector<int32_t> data = tokens(c, 3);
    const Steps whole = whole_model(c, Precision::kF32, data);
    for (const std::vector<int64_t>& split :
         {std::vector<int64_t>{6}, {1, 2, 2, 1}, {2, 4}, {1, 1, 1, 1, 1, 1}}) {
      SCOPED_TRACE(fmt::format("{}, split {}", enum_name(c.arch), split.size()));
      expect_same(whole, staged(c, {}, split, data), 1e-5);
    }
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      SCOPED_TRACE(fmt::format("{}, split backward, recompute {}", enum_name(c.arch), int(r)));
      expect_same(whole, staged(c, {.recompute = r, .split_backward = true}, {1, 3, 2}, data),
                  1e-5);
    }
  }
}

TEST(PipelineStage, Bf16StagesFollowTheWholeBf16Model) {
  const ModelConfig c = six_blocks(small_configs(kT).llama);
  const std::vector<int32_t> data = tokens(c, 5);
  const Steps whole = whole_model(c, Precision::kBf16, data);
  expect_same(whole, staged(c, {.precision = Precision::kBf16}, {1, 2, 2, 1}, data), 1e-3);
  for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
    expect_same(whole,
                staged(c, {.precision = Precision::kBf16, .recompute = r, .split_backward = true},
                       {1, 2, 2, 1}, data),
                1e-3);
  }
}

TEST(PipelineStage, EachSlotCostsWhatTheMemoryModelCounts) {
  const ModelConfig c = six_blocks(small_configs(kT).moe);
  for (const auto& [begin, end] : {std::pair{0, 2}, std::pair{2, 4}, std::pair{4, 6}}) {
    const Sharding stage{.block_begin = begin, .block_end = end};
    ActivationOptions o{.max_batch = kB, .max_seq = kT, .training = true};
    const ActivationBytes one = activation_bytes(c, stage, o);
    o.in_flight = 4;
    EXPECT_EQ(activation_bytes(c, stage, o).total, one.total + 3 * one.per_micro_batch);
  }
}

// A split backward holds each linear's output gradient per slot, and the inputs that
// recomputation would drop: the slot grows by exactly that, and the model allocates what the
// memory model counts.
TEST(PipelineStage, ASplitBackwardHoldsTheLinearsOutputGradientsPerSlot) {
  const ModelConfig c = six_blocks(small_configs(kT).gpt2);
  const int64_t N = kB * kT, C = c.d_model, F = c.ffn();
  const int64_t dy_floats = N * (3 * C + C + F + C);  // qkv, attention out, MLP in and out
  const int64_t inputs = N * (C + C + C + F);         // ln1, attention output, ln2, activation
  for (Precision p : {Precision::kF32, Precision::kBf16}) {
    const int64_t element = p == Precision::kF32 ? 4 : 2;
    for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
      SCOPED_TRACE(fmt::format("precision {}, recompute {}", int(p), int(r)));
      ActivationOptions o{.max_batch = kB,
                          .max_seq = kT,
                          .training = true,
                          .precision = p,
                          .recompute = r,
                          .threads = num_threads()};
      const ActivationBytes whole = activation_bytes(c, Sharding{}, o);
      o.split_backward = true;
      const ActivationBytes split = activation_bytes(c, Sharding{}, o);
      const int64_t copied = r == Recompute::kNone        ? 0
                             : r == Recompute::kSelective ? N * (C + C + F)
                                                          : inputs;
      EXPECT_EQ(split.saved_per_layer - whole.saved_per_layer, element * (dy_floats + copied));
      Transformer m(c, kB, kT, true,
                    {.precision = p, .recompute = r, .in_flight = 2, .split_backward = true});
      o.in_flight = 2;
      EXPECT_EQ(m.activation_bytes_total(), activation_bytes(c, Sharding{}, o).total);
    }
  }
}

TEST(PipelineStage, AStageRunsOnlyItsOwnSteps) {
  const ModelConfig c = six_blocks(small_configs(kT).gpt2);
  ModelParallel middle;
  middle.sharding = {.block_begin = 2, .block_end = 4};
  Transformer m(c, kB, kT, true, {.parallel = &middle, .in_flight = 2});
  std::vector<int32_t> t(kB * kT, 1);
  testing::expect_error([&] { runtime::TrainStep step(m); }, {"whole model", "PipelineStage"});
  runtime::PipelineStage stage(m);
  testing::expect_error([&] { stage.backward(1, nullptr); }, {"slot 1", "holds no forward"});
  EXPECT_THROW(stage.input(2), Error);
  std::fill_n(stage.input(0), stage.floats(kB, kT), 0.5f);
  stage.forward(0, nullptr, nullptr, kB, kT, 1);
  testing::expect_error([&] { stage.backward_input(0, nullptr); }, {"split its backward"});
  testing::expect_error([&] { stage.backward_weight(0); }, {"split its backward"});
  // A stage built for inference serves its blocks (decode), but not the whole model's logits.
  Transformer serving(c, kB, kT, false, {.parallel = &middle});
  EXPECT_THROW(serving.next_token_logits(t.data(), kT), Error);
}

}  // namespace
}  // namespace tessera::model
