// The calibrated step-time model against real training steps on this machine.
#include "tessera/plan/calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "tessera/core/config.h"
#include "tessera/core/rng.h"
#include "tessera/dist/single_communicator.h"
#include "tessera/model/transformer.h"
#include "tessera/train/run_config.h"
#include "tessera/train/zero_state.h"

namespace tessera::plan {
namespace {

model::ModelConfig shipped(const std::string& name) {
  Config config(train::run_config_schema());
  config.load_file(std::string(TESSERA_SOURCE_DIR) + "/configs/" + name);
  return train::run_config_from(config).model;
}

// Seconds of each of `steps` training steps after one warm-up, run as the trainer runs them.
std::vector<double> timed_steps(const model::ModelConfig& config, const StepShape& step,
                                int steps) {
  train::TrainConfig tc;
  dist::SingleCommunicator alone;
  train::ZeroState state(config, tc, /*stage=*/0, alone, int64_t{4} << 20);
  model::Transformer model(config, step.batch, step.seq, true,
                           {.recompute = step.recompute, .store = &state});
  state.init(1337);
  const int64_t N = step.batch * step.seq;
  CounterRng rng(42, 0);
  std::vector<int32_t> x(N), y(N);
  for (int64_t i = 0; i < N; ++i) {
    x[i] = int32_t(rng.below(2 * i, config.vocab_size));
    y[i] = int32_t(rng.below(2 * i + 1, config.vocab_size));
  }
  std::vector<double> seconds;
  for (int s = 0; s <= steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    state.zero_grad();
    state.begin_micro_step(true);
    model.forward_backward(x.data(), y.data(), step.batch, step.seq, 1.0f);
    state.reduce_gradients();
    state.update(3e-4, 1.0f);
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) seconds.push_back(dt);
  }
  return seconds;
}

// Calibrates, predicts, then checks the prediction against the fastest of a few real steps:
// the calibration keeps the fastest of its runs too, so both sides describe the machine when
// nothing else competes for its cores.
void expect_prediction_matches(const std::string& config_file, const StepShape& step) {
  const model::ModelConfig config = shipped(config_file);
  dist::SingleCommunicator alone;
  const auto t0 = std::chrono::steady_clock::now();
  const MachineRates rates = measure_machine(config, step, alone);
  const double calibration_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const StepPrediction p = predict_step(config, step, rates);
  const std::vector<double> steps = timed_steps(config, step, 3);
  const double measured = *std::min_element(steps.begin(), steps.end());
  std::printf("%s B%lld T%lld: predicted %.1f ms (matmul %.1f, attention %.1f, memory %.1f, "
              "optimizer %.1f), measured %.1f ms (steps:",
              config_file.c_str(), (long long)step.batch, (long long)step.seq, 1e3 * p.total_s,
              1e3 * p.matmul_s, 1e3 * p.attention_s, 1e3 * p.memory_bound_s, 1e3 * p.optimizer_s,
              1e3 * measured);
  for (double s : steps) std::printf(" %.1f", 1e3 * s);
  std::printf("), ratio %.3f, calibration took %.2f s\n", p.total_s / measured, calibration_s);
  EXPECT_GT(p.total_s / measured, 0.75);
  EXPECT_LT(p.total_s / measured, 1.25);
  EXPECT_LT(calibration_s, 2.0);
}

TEST(Calibration, GemmsCountSixFlopsPerWeightPerToken) {
  const model::ModelConfig c = shipped("gpt2-124m.toml");
  const StepShape step{2, 128};
  double flops = 0;
  for (const auto& [shape, calls] : step_gemms(c, step)) flops += double(calls) * shape.flops();
  const double weights = double(c.n_layer) * 12 * c.d_model * c.d_model +
                         double(c.vocab_size) * c.d_model;
  EXPECT_DOUBLE_EQ(flops, 6 * weights * double(step.batch * step.seq));
}

TEST(Calibration, FullRecomputeRepeatsTheBlockForwardGemms) {
  const model::ModelConfig c = shipped("tiny.toml");
  double plain = 0, full = 0;
  for (const auto& [shape, calls] : step_gemms(c, {16, 256})) plain += calls * shape.flops();
  for (const auto& [shape, calls] : step_gemms(c, {16, 256, model::Recompute::kFull})) {
    full += calls * shape.flops();
  }
  EXPECT_DOUBLE_EQ(full - plain, 2.0 * 16 * 256 * c.n_layer * 12 * c.d_model * c.d_model);
}

TEST(Calibration, RejectsMixtureOfExperts) {
  const model::ModelConfig moe = shipped("moe-tiny.toml");
  EXPECT_THROW(step_gemms(moe, {2, 64}), Error);
}

TEST(Calibration, PredictsTinyStep) { expect_prediction_matches("tiny.toml", {16, 256}); }

TEST(Calibration, PredictsGpt2SmallStep) { expect_prediction_matches("gpt2-124m.toml", {2, 128}); }

}  // namespace
}  // namespace tessera::plan
