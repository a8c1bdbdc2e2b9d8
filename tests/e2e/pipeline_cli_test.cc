// Pipeline parallelism under real mpirun: every schedule (zero-bubble's split backward included),
// at pp = 2 and 4, composed with tensor, data and expert parallelism, on even, uneven and given
// splits, follows the single-rank loss curve of the same global batch and seed (held-out losses
// included); checkpoints resume across a change of pp; what a pipeline cannot run ends every rank
// with one clear error.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

// Eight blocks, so that pp = 4 interleaved over 2 virtual stages has one block per stage, and
// four micro-batches, which interleaving on 4 ranks needs.
const std::string kEightBlockGpt2 =
    kSmallModel +
    " --set model.n_layer=8 --set model.n_head=4 --set train.grad_accum=4"
    " --set train.eval_every=10";
const std::string kEightBlockLlama =
    kEightBlockGpt2 + " --set model.arch=llama --set model.tie_embeddings=false";
const std::string kEightBlockMoe =
    kEightBlockLlama + " --set model.moe_experts=4 --set model.moe_top_k=2";

class PipelineCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  std::string args(const std::string& out, const std::string& model, const std::string& extra) {
    return "train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + model +
           " --set train.steps=20 --set train.threads=1 " + extra;
  }
  CliResult train(int ranks, const std::string& out, const std::string& model,
                  const std::string& extra) {
    return ranks == 1 ? run_cli(args(out, model, extra)) : run_mpi(ranks, args(out, model, extra));
  }
  // Trains and returns the run's metrics: training losses, then held-out losses.
  std::pair<std::vector<double>, std::vector<double>> losses(int ranks, const std::string& out,
                                                             const std::string& model,
                                                             const std::string& extra) {
    const CliResult r = train(ranks, out, model, extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (extra.find("mesh.pp=") != std::string::npos) {
      EXPECT_NE(r.output.find("pipeline: "), std::string::npos) << r.output;
    }
    std::vector<double> held_out;
    std::ifstream in(dir / out + "/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (record.contains("val_loss")) held_out.push_back(record["val_loss"].get<double>());
    }
    return {training_losses(dir / out), held_out};
  }
  TempDir dir{"tessera-pp-cli"};
};

void expect_same(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                 const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] / want[i] - 1));
    EXPECT_NEAR(got[i] / want[i], 1.0, tolerance) << what << " " << i + 1;
  }
  std::printf("  %zu %s, worst relative difference %.2e\n", got.size(), what, worst);
}

TEST_F(PipelineCli, EveryScheduleAndLayoutFollowsTheSingleRankLossCurve) {
  const std::string interleaved = " --set mesh.pp_schedule=interleaved --set mesh.pp_virtual=2";
  const std::string zero_bubble = " --set mesh.pp_schedule=zb-h1";
  const std::vector<std::tuple<std::string, std::string, std::string, std::vector<JobLayout>>>
      cases = {
          {"gpt2",
           kEightBlockGpt2,
           "",
           {{2, "--set mesh.pp=2 --set mesh.pp_schedule=gpipe"},
            {2, "--set mesh.pp=2 --set mesh.pp_schedule=1f1b"},
            {2, "--set mesh.pp=2" + interleaved},
            {2, "--set mesh.pp=2" + zero_bubble},
            {4, "--set mesh.pp=4 --set mesh.pp_schedule=gpipe"},
            {4, "--set mesh.pp=4 --set mesh.pp_schedule=1f1b"},
            {4, "--set mesh.pp=4" + interleaved},
            {4, "--set mesh.pp=4" + zero_bubble},
            {2, "--set mesh.pp=2 --set mesh.pp_layers=3,5"},
            {8,
             "--set mesh.pp=2 --set mesh.tp=2 --set mesh.dp=2 --set train.zero=1" + interleaved}}},
          {"gpt2-6-blocks", kEightBlockGpt2, " --set model.n_layer=6", {{4, "--set mesh.pp=4"}}},
          // One kv head shared by both tensor-parallel ranks; sequence parallelism gathers the
          // norm outputs again for the weight gradients that zero-bubble takes later.
          {"llama",
           kEightBlockLlama + " --set model.n_kv_head=1",
           "",
           {{4, "--set mesh.pp=2 --set mesh.tp=2 --set train.recompute=full"},
            {4,
             "--set mesh.pp=2 --set mesh.tp=2 --set mesh.sequence_parallel=true"
             " --set train.recompute=selective" +
                 zero_bubble}}},
          {"moe",
           kEightBlockMoe,
           "",
           {{4, "--set mesh.pp=2 --set mesh.dp=2 --set mesh.ep=2"},
            {4,
             "--set mesh.pp=2 --set mesh.dp=2 --set mesh.ep=2 --set train.zero=1" + zero_bubble}}}};
  for (const auto& [name, model, extra, layouts] : cases) {
    SCOPED_TRACE(name);
    const auto [reference, held_out] = losses(1, name + "-one", model, extra);
    ASSERT_EQ(reference.size(), 20u);
    ASSERT_EQ(held_out.size(), 3u);
    int i = 0;
    for (const JobLayout& l : layouts) {
      SCOPED_TRACE(l.mesh);
      std::printf("%s, %s:\n", name.c_str(), l.mesh.c_str());
      const auto [got, got_held_out] =
          losses(l.ranks, name + "-" + std::to_string(i++), model, extra + " " + l.mesh);
      expect_same(got, reference, 1e-5, "training losses");
      expect_same(got_held_out, held_out, 1e-5, "held-out losses");
    }
  }
}

TEST_F(PipelineCli, Bf16FollowsItsSingleRankCurveWithinTwoPercent) {
  const std::string bf16 = " --set train.precision=bf16";
  const auto [reference, held_out] = losses(1, "bf16-one", kEightBlockGpt2, bf16);
  int i = 0;
  for (const JobLayout& l :
       {JobLayout{2, "--set mesh.pp=2 --set mesh.pp_schedule=interleaved --set mesh.pp_virtual=2"},
        JobLayout{2, "--set mesh.pp=2 --set mesh.pp_schedule=zb-h1"},
        JobLayout{4, "--set mesh.pp=2 --set mesh.dp=2 --set train.zero=1"}}) {
    SCOPED_TRACE(l.mesh);
    std::printf("bf16, %s:\n", l.mesh.c_str());
    expect_same(
        losses(l.ranks, "bf16-" + std::to_string(i++), kEightBlockGpt2, bf16 + " " + l.mesh).first,
        reference, 0.02, "training losses");
  }
}

// A run stops at step 10 on one layout and resumes from its checkpoint on another: the losses
// continue those of the uninterrupted run.
TEST_F(PipelineCli, CheckpointsResumeAcrossAChangeOfPipelineDepth) {
  const std::string every = " --set checkpoint.every=10";
  const std::vector<std::tuple<std::string, JobLayout, JobLayout>> cases = {
      {"pp2tp2", {4, "--set mesh.pp=2 --set mesh.tp=2"}, {4, "--set mesh.dp=4"}},
      {"dp4", {4, "--set mesh.dp=4 --set train.zero=1"}, {4, "--set mesh.pp=4"}},
  };
  for (const auto& [name, first, next] : cases) {
    SCOPED_TRACE(name);
    const std::vector<double> reference =
        losses(first.ranks, name, kEightBlockGpt2, every + " " + first.mesh).first;
    ASSERT_EQ(reference.size(), 20u);
    const fs::path step10 = fs::path(dir / name) / "checkpoints" / "step-000010";
    ASSERT_TRUE(fs::exists(step10 / "COMMIT"));
    const std::string out = name + "-resumed";
    fs::create_directories(fs::path(dir / out) / "checkpoints");
    fs::copy(step10, fs::path(dir / out) / "checkpoints" / "step-000010",
             fs::copy_options::recursive);
    std::printf("%s resumed at step 10 on %s:\n", name.c_str(), next.mesh.c_str());
    expect_same(losses(next.ranks, out, kEightBlockGpt2, every + " " + next.mesh).first,
                std::vector<double>(reference.begin() + 10, reference.end()), 1e-5,
                "training losses");
  }
}

TEST_F(PipelineCli, WhatAPipelineCannotRunEndsEveryRankWithOneClearError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--set mesh.pp=2 --set train.zero=2", "a pipeline combines with ZeRO-0 or ZeRO-1 only"},
      {"--set mesh.pp=2 --set mesh.pp_schedule=zb-h2",
       "mesh.pp_schedule must be \"gpipe\", \"1f1b\", \"interleaved\" or \"zb-h1\", got \"zb-h2\""},
      {"--set mesh.pp=2 --set mesh.pp_schedule=interleaved --set mesh.pp_virtual=2 "
       "--set train.grad_accum=3",
       "train.grad_accum"},
  };
  int i = 0;
  for (const auto& [mesh, message] : cases) {
    SCOPED_TRACE(mesh);
    const CliResult r = train(2, "bad-" + std::to_string(i++), kEightBlockGpt2, mesh);
    EXPECT_NE(r.exit_code, 0) << r.output;
    for (int rank = 0; rank < 2; ++rank) {
      const std::string line = "error: rank " + std::to_string(rank) + " of 2: ";
      const size_t at = r.output.find(line);
      ASSERT_NE(at, std::string::npos) << r.output;
      EXPECT_NE(r.output.substr(at, r.output.find('\n', at) - at).find(message), std::string::npos)
          << r.output;
    }
  }
}

}  // namespace
}  // namespace tessera::testing
