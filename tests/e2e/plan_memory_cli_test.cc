// `tessera plan` against the engine's own memory: one training step under real mpirun prints each
// rank's parameter, gradient, optimizer and activation bytes, and the planner, given the run's
// resolved config and the same layout, must predict each within 5% on every rank. Cases: tensor
// and sequence parallelism with data parallelism (GPT-2, ZeRO-1), ZeRO-3 over four data-parallel
// ranks, and a mixture of experts whose experts are split over expert-parallel ranks, dropless
// (room for every token choosing this rank) and with a capacity factor (room for its capacity).
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

constexpr double kTolerance = 0.05;

struct Memory {
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double model_state() const { return params + grads + optimizer; }
  double total() const { return model_state() + activations; }
};

// Every rank's line "memory rank R: ... | parameters N B, gradients N B, optimizer N B,
// activations N B (...)" that the trainer prints, in rank order.
std::vector<Memory> engine_memory(const std::string& output) {
  const std::regex line(
      R"(memory rank (\d+): .*\| parameters (\d+) B, gradients (\d+) B, optimizer (\d+) B, )"
      R"(activations (\d+) B)");
  std::vector<Memory> ranks;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    EXPECT_EQ(std::stoul(m[1]), ranks.size()) << m.str();
    ranks.push_back({std::stod(m[2]), std::stod(m[3]), std::stod(m[4]), std::stod(m[5])});
  }
  return ranks;
}

Memory planned_memory(const nlohmann::json& plan) {
  const nlohmann::json& m = plan.at("memory_bytes");
  Memory memory{m.at("params").get<double>(), m.at("grads").get<double>(),
                m.at("optimizer").get<double>(), m.at("activations").get<double>()};
  EXPECT_DOUBLE_EQ(m.at("total").get<double>(), memory.total());
  return memory;
}

// How a case trains: on `ranks` ranks, a global batch of `batch` sequences of seq_len tokens.
struct Job {
  int ranks = 4, batch = 4, seq_len = 32;
  std::string data = "corpus.txt";
};

class PlanMemoryCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }

  // Trains one f32 step of `model` under `mesh`, then plans the run's resolved config on as many
  // chips with `layout`, and compares every rank's memory with the plan's. Returns the engine's.
  std::vector<Memory> expect_plan_matches_engine(const std::string& name, const std::string& model,
                                                 const std::string& mesh, const std::string& layout,
                                                 double tolerance = kTolerance,
                                                 const Job& job = {}) {
    SCOPED_TRACE(name);
    const std::string out = dir / name, tokens = std::to_string(job.seq_len);
    const std::string batch = std::to_string(job.batch);
    const std::string args = "train --data " + (dir / job.data) + " --out " + out + model +
                             " --set train.steps=1 --set train.threads=1 --set train.precision=f32"
                             " --set train.recompute=none --set train.seq_len=" +
                             tokens + " --set model.max_seq=" + tokens +
                             " --set train.batch_size=" + batch + " " + mesh;
    const CliResult run = job.ranks == 1 ? run_cli(args) : run_mpi(job.ranks, args);
    EXPECT_EQ(run.exit_code, 0) << run.output;
    const std::vector<Memory> engine = engine_memory(run.output);
    EXPECT_EQ(engine.size(), size_t(job.ranks)) << run.output;

    const CliResult plan =
        run_cli("plan --model " + out + "/config.toml --hardware h100 --chips " +
                std::to_string(job.ranks) + " --global-batch " + batch + " --seq-len " + tokens +
                " --precision f32 --layout " + layout + " --json");
    EXPECT_EQ(plan.exit_code, 0) << plan.output;
    if (plan.exit_code != 0) return engine;
    const Memory planned = planned_memory(nlohmann::json::parse(plan.output));

    std::printf("%s (%s):\n", name.c_str(), layout.c_str());
    std::printf("  planner: model state %.0f B, activations %.0f B, total %.0f B\n",
                planned.model_state(), planned.activations, planned.total());
    for (size_t r = 0; r < engine.size(); ++r) {
      const Memory& e = engine[r];
      std::printf(
          "  rank %zu: model state %.0f B (planner / engine %.4f), activations %.0f B (%.4f), "
          "total %.0f B (%.4f)\n",
          r, e.model_state(), planned.model_state() / e.model_state(), e.activations,
          planned.activations / e.activations, e.total(), planned.total() / e.total());
      EXPECT_NEAR(planned.model_state() / e.model_state(), 1.0, tolerance) << "rank " << r;
      EXPECT_NEAR(planned.activations / e.activations, 1.0, tolerance) << "rank " << r;
      EXPECT_NEAR(planned.total() / e.total(), 1.0, tolerance) << "rank " << r;
    }
    return engine;
  }

  TempDir dir{"tessera-plan-memory"};
};

TEST_F(PlanMemoryCli, TensorAndSequenceParallelGpt2WithZero1) {
  expect_plan_matches_engine(
      "gpt2-dp2-tp2", kSmallModel + " --set model.n_head=4",
      "--set mesh.dp=2 --set mesh.tp=2 --set train.zero=1 --set mesh.sequence_parallel=true",
      "dp=2,tp=2,zero=1,mb=2,recompute=none,sp=1");
}

TEST_F(PlanMemoryCli, Zero3OverFourDataParallelRanks) {
  expect_plan_matches_engine("gpt2-dp4-zero3", kSmallModel, "--set mesh.dp=4 --set train.zero=3",
                             "dp=4,zero=3,mb=1,recompute=none");
}

TEST_F(PlanMemoryCli, ExpertsSplitOverTwoExpertParallelRanks) {
  expect_plan_matches_engine("moe-dp4-ep2",
                             kSmallModel +
                                 " --set model.arch=llama --set model.n_head=4"
                                 " --set model.moe_experts=4 --set model.tie_embeddings=false",
                             "--set mesh.dp=4 --set mesh.ep=2 --set train.zero=1",
                             "dp=4,ep=2,zero=1,mb=1,recompute=none");
}

TEST_F(PlanMemoryCli, CapacityBoundsWhatExpertParallelRanksReceive) {
  expect_plan_matches_engine("moe-dp4-ep4-capacity",
                             kSmallModel +
                                 " --set model.arch=llama --set model.n_head=4"
                                 " --set model.moe_experts=4 --set model.tie_embeddings=false"
                                 " --set model.moe_capacity_factor=1.25",
                             "--set mesh.dp=4 --set mesh.ep=4 --set train.zero=1",
                             "dp=4,ep=4,zero=1,mb=1,recompute=none");
}

TEST_F(PlanMemoryCli, ContextParallelLlamaWithZero1) {
  expect_plan_matches_engine("llama-dp2-cp2",
                             kSmallModel + kLlamaGqaFlags + " --set model.n_head=4",
                             "--set mesh.dp=2 --set mesh.cp=2 --set train.zero=1",
                             "dp=2,cp=2,zero=1,mb=2,recompute=none", 0.02);
}

// Context parallelism over 4,096-token sequences of a Llama: each of two cp ranks keeps what its
// half of every sequence saves, plus working buffers of the whole sequences' q, k and v and their
// gradients that attention gathers, one set for all blocks; the planner prices both, within 2%.
// The saved activations halve; with the working buffers a rank of this 4-block model holds 0.56
// of one rank's activations (the buffers' share shrinks as blocks are added).
TEST_F(PlanMemoryCli, ContextParallelHalvesEachRanksActivations) {
  std::string text;
  for (int i = 0; i < 3000; ++i) {
    text += "In the beginning the word was " + std::to_string(i % 7) + ", and it was good.\n";
  }
  write_file(dir / "long.txt", text);
  const std::string llama =
      kSmallModel +
      " --set model.arch=llama --set model.n_layer=4 --set model.n_head=4 --set model.d_model=64"
      " --set model.n_kv_head=2 --set model.tie_embeddings=false";
  const std::vector<Memory> one =
      expect_plan_matches_engine("llama-4096", llama, "", "mb=1,recompute=none", 0.02,
                                 {.ranks = 1, .batch = 1, .seq_len = 4096, .data = "long.txt"});
  const std::vector<Memory> cp = expect_plan_matches_engine(
      "llama-4096-cp2", llama, "--set mesh.cp=2", "cp=2,zero=0,mb=1,recompute=none", 0.02,
      {.ranks = 2, .batch = 1, .seq_len = 4096, .data = "long.txt"});
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(cp.size(), 2u);
  for (const Memory& rank : cp) {
    std::printf("  cp=2 rank activations / one rank's: %.3f\n",
                rank.activations / one[0].activations);
    EXPECT_LT(rank.activations, 0.57 * one[0].activations);
    EXPECT_GT(rank.activations, 0.5 * one[0].activations);
  }
}

}  // namespace
}  // namespace tessera::testing
