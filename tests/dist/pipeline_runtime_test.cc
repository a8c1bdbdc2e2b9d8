// The pipeline runtime across real ranks: with the world as the pipeline, every schedule it
// runs (GPipe, 1F1B, interleaved 1F1B with two stages per rank, ZB-H1 with its backwards split
// into input and weight gradients) gives the losses and, summed over the stages that hold them,
// the gradients of the whole model trained on one rank.
#include "tessera/runtime/pipeline_runtime.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tessera/comm/world.h"
#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/parallel/pipeline_simulator.h"
#include "tessera/parallel/pipeline_stages.h"
#include "tessera/runtime/train_step.h"
#include "tests/dist/dist_testing.h"

namespace tessera::dist {
namespace {

// Messages of 4 x 8 x 64 floats (8 KiB) go past Open MPI's eager limit for shared memory, so a
// send is only complete once its receive is posted, as large activations are.
constexpr int64_t kB = 4, kT = 8;

model::ModelConfig eight_blocks(model::Architecture arch) {
  model::ModelConfig c;
  c.arch = arch;
  c.vocab_size = 29;
  c.n_layer = 8;
  c.n_head = 2;
  c.d_model = 64;
  c.max_seq = kT;
  if (arch == model::Architecture::kLlama) {
    c.n_head = 4;
    c.n_kv_head = 2;
    c.ffn_hidden = 24;
    c.tie_embeddings = false;
  }
  return c;
}

struct Batches {
  std::vector<std::vector<int32_t>> inputs, targets;
  std::vector<runtime::MicroBatch> micro_batches;
};

Batches batches(const model::ModelConfig& c, int m) {
  const CounterRng rng(11, 0);
  Batches b;
  b.inputs.resize(m);
  b.targets.resize(m);
  uint64_t at = 0;
  for (int i = 0; i < m; ++i) {
    for (int64_t k = 0; k < kB * kT; ++k) {
      b.inputs[i].push_back(int32_t(rng.below(at++, uint64_t(c.vocab_size))));
      b.targets[i].push_back(int32_t(rng.below(at++, uint64_t(c.vocab_size))));
    }
  }
  for (int i = 0; i < m; ++i) b.micro_batches.push_back({b.inputs[i].data(), b.targets[i].data()});
  return b;
}

// One thread per rank: the ranks of a test job share the machine's cores.
class PipelineRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_ = num_threads();
    set_num_threads(1);
  }
  void TearDown() override { set_num_threads(threads_); }

 private:
  int threads_ = 1;
};

TEST_F(PipelineRuntime, EverySchedulesStepIsTheWholeModelsStep) {
  comm::Communicator& pp = comm::world();
  const int p = pp.size();
  for (model::Architecture arch : {model::Architecture::kGpt2, model::Architecture::kLlama}) {
    const model::ModelConfig c = eight_blocks(arch);
    const int m = 2 * p;
    const Batches data = batches(c, m);
    const float scale = 1.0f / float(m);

    model::Transformer whole(c, kB, kT, true);
    whole.init_weights(5);
    whole.zero_grad();
    double whole_loss = 0;
    for (const runtime::MicroBatch& mb : data.micro_batches) {
      whole_loss +=
          runtime::TrainStep(whole).forward_backward(mb.inputs, mb.targets, kB, kT, scale);
    }
    std::map<std::string, const model::ParamInfo*> by_name;
    for (const model::ParamInfo& e : whole.layout().entries()) by_name[e.name] = &e;

    std::vector<std::pair<comm::PipelineScheduleKind, int>> schedules = {
        {comm::PipelineScheduleKind::kGPipe, 1},
        {comm::PipelineScheduleKind::k1F1B, 1},
        {comm::PipelineScheduleKind::kZeroBubbleH1, 1}};
    if (p > 1) schedules.push_back({comm::PipelineScheduleKind::kInterleaved1F1B, 2});
    for (const auto& [kind, v] : schedules) {
      SCOPED_TRACE(fmt::format("{} on {} ranks, {}", enum_name(kind), p, enum_name(arch)));
      const parallel::PipelineTable table = parallel::make_pipeline_table(kind, p, v, m);
      runtime::StageModels built = runtime::build_stage_models(
          c, table, pp.rank(),
          parallel::stage_boundaries(parallel::stage_blocks(c, table.stages(), {})), kB, kT, {});
      for (model::Transformer* s : built.stages) {
        s->init_weights(5);
        s->zero_grad();
      }
      const std::vector<model::Transformer*>& stages = built.stages;
      runtime::PipelineRuntime runtime(table, pp, stages, built.slots);
      double loss = runtime.run(data.micro_batches, kB, kT, scale);
      pp.all_reduce(&loss, 1);
      EXPECT_NEAR(loss, whole_loss, 1e-5 * std::abs(whole_loss));

      // Each stage's gradients in the whole model's places, summed over the ranks.
      std::vector<double> grads(whole.layout().total(), 0.0);
      for (model::Transformer* s : stages) {
        const std::span<float> g = s->grads();
        for (const model::ParamInfo& e : s->layout().entries()) {
          const model::ParamInfo& w = *by_name.at(e.name);
          for (int64_t i = 0; i < e.shape.numel(); ++i) grads[w.offset + i] += g[e.offset + i];
        }
      }
      pp.all_reduce(grads.data(), int64_t(grads.size()));
      const std::span<float> expected = whole.grads();
      for (const model::ParamInfo& e : whole.layout().entries()) {
        double norm = 0, diff = 0;
        for (int64_t i = e.offset; i < e.offset + e.shape.numel(); ++i) {
          norm += double(expected[i]) * expected[i];
          diff += (grads[i] - expected[i]) * (grads[i] - expected[i]);
        }
        EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm) + 1e-12) << e.name;
      }
    }
  }
}

TEST_F(PipelineRuntime, ASplitScheduleNeedsModelsBuiltToSplitTheirBackward) {
  comm::Communicator& pp = comm::world();
  const model::ModelConfig c = eight_blocks(model::Architecture::kGpt2);
  const int m = 2 * pp.size();
  const std::vector<int64_t> boundaries =
      parallel::stage_boundaries(parallel::stage_blocks(c, pp.size(), {}));
  runtime::StageModels whole_backward = runtime::build_stage_models(
      c, parallel::make_pipeline_table(comm::PipelineScheduleKind::k1F1B, pp.size(), 1, m),
      pp.rank(), boundaries, kB, kT, {});
  const parallel::PipelineTable zb =
      parallel::make_pipeline_table(comm::PipelineScheduleKind::kZeroBubbleH1, pp.size(), 1, m);
  testing::expect_error(
      [&] { runtime::PipelineRuntime(zb, pp, whole_backward.stages, whole_backward.slots); },
      {"zb-h1", "split_backward"});
}

}  // namespace
}  // namespace tessera::dist
