// Pipeline stages run in one process: the stages of a split, each a Transformer over its blocks
// with several micro-batches in flight, handing activations forward and gradients back, give
// the whole model's losses and gradients, for tied and untied heads, a mixture of experts and
// uneven splits; and each slot costs what the memory model says.
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
#include "tessera/model/transformer.h"
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

Steps whole_model(const ModelConfig& c, Precision precision, const std::vector<int32_t>& data) {
  Transformer m(c, kB, kT, true, {.precision = precision});
  m.init_weights(7);
  m.zero_grad();
  Steps run;
  for (int64_t mb = 0; mb < kMicroBatches; ++mb) {
    const int32_t* x = data.data() + mb * kB * (kT + 1);
    std::vector<int32_t> in, out;
    for (int64_t b = 0; b < kB; ++b) {
      in.insert(in.end(), x + b * (kT + 1), x + b * (kT + 1) + kT);
      out.insert(out.end(), x + b * (kT + 1) + 1, x + (b + 1) * (kT + 1));
    }
    run.losses.push_back(m.forward_backward(in.data(), out.data(), kB, kT, 1.0f / kMicroBatches));
  }
  add_gradients(m, run.gradients);
  return run;
}

// GPipe's order over the stages: every micro-batch's forward through all of them, then the
// backwards, last micro-batch first, so that each slot is used out of order.
Steps staged(const ModelConfig& c, Precision precision, const std::vector<int64_t>& blocks,
           const std::vector<int32_t>& data) {
  std::vector<ModelParallel> parallel(blocks.size());
  std::vector<std::unique_ptr<Transformer>> stages;
  int64_t begin = 0;
  for (size_t s = 0; s < blocks.size(); ++s) {
    parallel[s].sharding = {.block_begin = begin, .block_end = begin + blocks[s]};
    begin += blocks[s];
    stages.push_back(std::make_unique<Transformer>(
        c, kB, kT, true,
        ModelOptions{
            .precision = precision, .parallel = &parallel[s], .in_flight = kMicroBatches}));
    stages.back()->init_weights(7);
    stages.back()->zero_grad();
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
        std::copy_n(stages[s - 1]->stage_output(), rows, stages[s]->stage_input(mb));
      }
      const float loss =
          stages[s]->stage_forward(mb, in[mb].data(), out[mb].data(), kB, kT, 1.0f / kMicroBatches);
      if (s + 1 == stages.size()) run.losses.push_back(loss);
    }
  }
  for (int64_t mb = kMicroBatches - 1; mb >= 0; --mb) {
    for (size_t s = stages.size(); s-- > 0;) {
      if (s + 1 < stages.size()) {
        std::copy_n(stages[s + 1]->stage_gradient(), rows, stages[s]->stage_gradient());
      }
      stages[s]->stage_backward(mb, in[mb].data());
    }
  }
  for (auto& stage : stages) add_gradients(*stage, run.gradients);
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

TEST(PipelineStage, StagesInFlightGiveTheWholeModelsLossesAndGradients) {
  const SmallConfigs small = small_configs(kT);
  for (const ModelConfig& c :
       {six_blocks(small.gpt2), six_blocks(small.llama), six_blocks(small.moe)}) {
    const std::vector<int32_t> data = tokens(c, 3);
    const Steps whole = whole_model(c, Precision::kF32, data);
    for (const std::vector<int64_t>& split :
         {std::vector<int64_t>{6}, {1, 2, 2, 1}, {2, 4}, {1, 1, 1, 1, 1, 1}}) {
      SCOPED_TRACE(fmt::format("{}, split {}", architecture_name(c.arch), split.size()));
      expect_same(whole, staged(c, Precision::kF32, split, data), 1e-5);
    }
  }
}

TEST(PipelineStage, Bf16StagesFollowTheWholeBf16Model) {
  const ModelConfig c = six_blocks(small_configs(kT).llama);
  const std::vector<int32_t> data = tokens(c, 5);
  expect_same(whole_model(c, Precision::kBf16, data),
              staged(c, Precision::kBf16, {1, 2, 2, 1}, data), 1e-3);
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

TEST(PipelineStage, AStageRunsOnlyItsOwnSteps) {
  const ModelConfig c = six_blocks(small_configs(kT).gpt2);
  ModelParallel middle;
  middle.sharding = {.block_begin = 2, .block_end = 4};
  Transformer m(c, kB, kT, true, {.parallel = &middle, .in_flight = 2});
  std::vector<int32_t> t(kB * kT, 1);
  EXPECT_THROW(m.forward_backward(t.data(), t.data(), kB, kT, 1), Error);
  EXPECT_THROW(m.stage_backward(1, nullptr), Error);  // nothing was run forward in slot 1
  EXPECT_THROW(m.stage_input(2), Error);
  EXPECT_THROW(Transformer(c, kB, kT, false, {.parallel = &middle}), Error);
}

}  // namespace
}  // namespace tessera::model
