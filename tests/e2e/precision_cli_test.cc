// Mixed precision through the real trainer: bf16 and f16 follow the f32 loss curve, f16 skips
// overflowing steps and backs its loss scale off, and Llama/MoE runs log what they should.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

class PrecisionCli : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir / "corpus.txt", small_corpus()); }
  CliResult train(const std::string& out, const std::string& extra) {
    return run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / out) + kSmallModel +
                   " --set train.steps=30 --set train.lr=3e-3 " + extra);
  }
  std::vector<nlohmann::json> records(const std::string& out) {
    std::ifstream in(dir / out + "/metrics.jsonl");
    std::vector<nlohmann::json> r;
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) r.push_back(j);
    }
    return r;
  }
  TempDir dir{"tessera-precision-cli"};
};

TEST_F(PrecisionCli, LowPrecisionTracksTheF32LossCurve) {
  ASSERT_EQ(train("f32", "").exit_code, 0);
  const std::vector<double> f32 = training_losses(dir / "f32");
  ASSERT_EQ(f32.size(), 30u);
  for (const char* p : {"bf16", "f16"}) {
    SCOPED_TRACE(p);
    const CliResult r = train(p, std::string("--set train.precision=") + p);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find(std::string("matmuls ") + p), std::string::npos) << r.output;
    const std::vector<double> low = training_losses(dir / p);
    ASSERT_EQ(low.size(), f32.size());
    EXPECT_LT(low.back(), low.front() - 1.0);
    for (size_t i = 0; i < low.size(); ++i) {
      EXPECT_NEAR(low[i] / f32[i], 1.0, 0.02) << "step " << i + 1;
    }
  }
}

TEST_F(PrecisionCli, F16SkipsOverflowingStepsAndBacksOff) {
  // 2^30 overflows the f16 logit gradients (about scale / tokens, above f16's 65504); the scale
  // halves on each skipped step until the gradients fit, then training proceeds.
  const CliResult r = train("f16", "--set train.precision=f16 --set train.loss_scale=1073741824");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("overflow, skipped"), std::string::npos) << r.output;
  const auto steps = records("f16");
  ASSERT_EQ(steps.size(), 30u);
  EXPECT_TRUE(steps.front()["skipped"].get<bool>());
  EXPECT_FALSE(steps.back()["skipped"].get<bool>());
  EXPECT_LT(steps.back()["loss_scale"].get<double>(), steps.front()["loss_scale"].get<double>());
  for (size_t i = 1; i < steps.size(); ++i) {
    const double before = steps[i - 1]["loss_scale"], after = steps[i]["loss_scale"];
    if (steps[i - 1]["skipped"].get<bool>()) EXPECT_EQ(after, before / 2) << "step " << i + 1;
  }
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>() - 1.0);
}

TEST_F(PrecisionCli, LlamaAndMixtureTrainAndReportExperts) {
  const std::string llama =
      " --set model.arch=llama --set model.n_head=4 --set model.n_kv_head=2 "
      "--set model.tie_embeddings=false --set model.ffn_hidden=48";
  CliResult r = train("llama", llama + " --set train.recompute=full");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("recompute full"), std::string::npos) << r.output;
  std::vector<double> losses = training_losses(dir / "llama");
  EXPECT_LT(losses.back(), losses.front() - 1.0);

  r = train("moe", llama +
                       " --set model.moe_experts=4 --set model.moe_top_k=2 "
                       "--set model.moe_capacity_factor=1.0 --set train.precision=bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto steps = records("moe");
  ASSERT_EQ(steps.size(), 30u);
  EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>() - 1.0);
  const auto& counts = steps.back()["expert_tokens"];
  ASSERT_EQ(counts.size(), 2u);  // one list per block
  const int64_t tokens = 4 * 32, capacity = tokens * 2 / 4;
  int64_t kept = 0;
  for (const auto& block : counts) {
    ASSERT_EQ(block.size(), 4u);
    for (const auto& n : block) {
      EXPECT_LE(n.get<int64_t>(), capacity);
      kept += n.get<int64_t>();
    }
  }
  EXPECT_EQ(kept + steps.back()["dropped_assignments"].get<int64_t>(), 2 * tokens * 2);
  EXPECT_GT(steps.back()["aux_loss"].get<double>(), 0);
}

TEST_F(PrecisionCli, BadPrecisionAndRecomputeNameTheKey) {
  expect_one_line_error(train("x", "--set train.precision=fp8"), "train.precision");
  expect_one_line_error(train("x", "--set train.recompute=some"), "train.recompute");
  expect_one_line_error(train("x", "--set model.arch=llama --set model.n_kv_head=3"),
                        "model.n_kv_head");
  expect_one_line_error(train("x", "--set model.moe_experts=4"), "model.moe_experts");
}

}  // namespace
}  // namespace tessera::testing
