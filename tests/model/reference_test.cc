// GPT-2 forward/backward against PyTorch, and a whole-model finite-difference spot check.
//
// The reference fixture comes from tests/reference/gpt2_reference.py (an independent PyTorch
// implementation run with Debian's python3-torch). Set TESSERA_REFERENCE_FIXTURE to a directory
// the script wrote; otherwise the test runs the script itself into a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tessera/model/parameters.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"
#include "tests/model/reference_fixture.h"

namespace tessera::model {
namespace {

using namespace reference;

const Fixture* gpt2_fixture() { return fixture("gpt2_reference.py"); }

TEST(Gpt2Reference, MatchesPyTorchLossAndGradients) {
  const Fixture* f = gpt2_fixture();
  ASSERT_NE(f, nullptr);
  ASSERT_LT(f->T, f->config.max_seq) << "the fixture should leave some positions unused";
  Transformer model(f->config, f->B, f->T, /*training=*/true);
  load_parameters(*f, model);
  const int32_t* inputs = f->inputs();
  const int32_t* targets = f->targets();

  model.zero_grad();
  const float loss = runtime::TrainStep(model).forward_backward(inputs, targets, f->B, f->T, 1.0f);
  std::printf("loss %.7f, PyTorch %.7f\n", loss, f->loss);
  EXPECT_LT(std::abs(loss - f->loss) / std::abs(f->loss), 1e-4);
  expect_grads_match(*f, model, 1e-4);

  const float eval_loss = model.forward(inputs, targets, f->B, f->T);
  EXPECT_LT(std::abs(eval_loss - f->loss) / std::abs(f->loss), 1e-4);
  EXPECT_NEAR(eval_loss, loss, 1e-6 * std::abs(loss));
}

TEST(Gpt2Reference, TwoHalfScaledMicroStepsAccumulateToReference) {
  const Fixture* f = gpt2_fixture();
  ASSERT_NE(f, nullptr);
  Transformer model(f->config, f->B, f->T, /*training=*/true);
  load_parameters(*f, model);
  const int32_t* inputs = f->inputs();
  const int32_t* targets = f->targets();

  model.zero_grad();
  for (int step = 0; step < 2; ++step) {
    const float loss =
        runtime::TrainStep(model).forward_backward(inputs, targets, f->B, f->T, 0.5f);
    EXPECT_LT(std::abs(loss - f->loss) / std::abs(f->loss), 1e-4);
  }
  expect_grads_match(*f, model, 1e-4);
}

// Whole-model central differences in float32, no torch needed: (L(p+h) - L(p-h)) / 2h from
// forward() against forward_backward()'s gradient, relative error < 2e-2 wherever
// |grad| > 1e-3. Step h = 1e-2 balances two errors. Rounding: f32 perturbs the loss (a few units)
// by ~1e-6, i.e. ~5e-5 in the quotient, under 5% of the smallest gradient compared and far less for
// typical ones (|grad| ~ 0.1). Truncation: O(h^2), measured 0.1-0.7% worst over 450 seeds with this
// config, scaling as h^2 as it should. It grows with the curvature of LayerNorm in its input,
// ~rstd^2, hence embeddings of unit scale and d_model 16: with d_model 8 and 0.3-scale embeddings,
// single wpe elements reached 20% truncation error at h = 1e-2 (yet converged to the backward value
// as h shrank).
TEST(Gpt2FiniteDifference, SpotCheckMatchesBackward) {
  ModelConfig config;
  config.vocab_size = 11;
  config.n_layer = 2;
  config.n_head = 2;
  config.d_model = 16;
  config.max_seq = 8;
  const int64_t B = 2, T = 5;
  Transformer model(config, B, T, /*training=*/true);

  // Random non-trivial weights, like the PyTorch fixture (LayerNorm gains around 1, nonzero
  // biases, Linear weights ~ 1/sqrt(fan_in)) but unit-scale embeddings, see above.
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [name, view] : named_views(model.layout(), model.params().data())) {
    float* p = view.as<float>();
    const bool is_norm = name.find(".ln") != std::string::npos || name.rfind("lnf.", 0) == 0;
    const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    for (int64_t i = 0; i < view.numel(); ++i) {
      const float r = normal(rng);
      if (is_norm) {
        p[i] = is_weight ? 1.0f + 0.2f * r : 0.1f * r;
      } else if (!is_weight) {
        p[i] = 0.05f * r;
      } else if (name == "wte.weight" || name == "wpe.weight") {
        p[i] = r;
      } else {
        p[i] = r / std::sqrt(float(view.shape[1]));
      }
    }
  }
  std::vector<int32_t> inputs(B * T), targets(B * T);
  std::uniform_int_distribution<int32_t> token(0, int32_t(config.vocab_size) - 1);
  for (auto& t : inputs) t = token(rng);
  for (auto& t : targets) t = token(rng);

  model.zero_grad();
  runtime::TrainStep(model).forward_backward(inputs.data(), targets.data(), B, T, 1.0f);
  const std::vector<float> grads(model.grads().begin(), model.grads().end());

  // Two elements from each of these, then the rest from anywhere. Within a tensor, the element
  // is the largest-|grad| of a few random candidates, so most samples clear the 1e-3 floor.
  const std::vector<std::string> required = {"wte.weight",           "wpe.weight",
                                             "blocks.0.ln1.bias",    "blocks.1.attn.qkv.weight",
                                             "blocks.0.fcproj.bias", "lnf.weight"};
  const auto& entries = model.layout().entries();
  std::vector<const ParamInfo*> picks;
  for (const auto& name : required) {
    picks.push_back(&model.layout().find(name));
    picks.push_back(&model.layout().find(name));
  }
  std::uniform_int_distribution<size_t> any_entry(0, entries.size() - 1);
  while (picks.size() < 22) picks.push_back(&entries[any_entry(rng)]);

  const float h = 1e-2f;
  float* params = model.params().data();
  int compared = 0;
  double worst = 0;
  for (const ParamInfo* info : picks) {
    const int64_t n = info->shape.numel();
    std::uniform_int_distribution<int64_t> element(0, n - 1);
    int64_t best = element(rng);
    for (int k = 0; k < 4; ++k) {
      const int64_t c = element(rng);
      if (std::abs(grads[info->offset + c]) > std::abs(grads[info->offset + best])) best = c;
    }
    const int64_t at = info->offset + best;
    const float saved = params[at];
    params[at] = saved + h;
    const float up = model.forward(inputs.data(), targets.data(), B, T);
    params[at] = saved - h;
    const float down = model.forward(inputs.data(), targets.data(), B, T);
    params[at] = saved;
    const double numeric = (double(up) - double(down)) / (2.0 * h);
    const double analytic = grads[at];
    if (std::abs(analytic) <= 1e-3) continue;
    ++compared;
    const double rel = std::abs(numeric - analytic) / std::abs(analytic);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 2e-2) << info->name << "[" << best << "]: finite difference " << numeric
                         << ", backward " << analytic;
  }
  std::printf("finite differences: %d elements compared, worst relative error %.3g\n", compared,
              worst);
  EXPECT_GE(compared, 12) << "too few sampled gradients above the 1e-3 floor";
}

}  // namespace
}  // namespace tessera::model
