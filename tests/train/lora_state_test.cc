// A LoRA run's training state: AdamW receives the gradients of the adapters that the plain model
// computes, and the state holds (and saves) the adapters alone; a frozen model held in q8_0 gives
// the gradients of the plain model whose block matrices hold its q8_0 values.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "tessera/ckpt/state_reader.h"
#include "tessera/comm/mesh.h"
#include "tessera/comm/single_communicator.h"
#include "tessera/core/rng.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"
#include "tessera/train/train_state.h"
#include "tests/model/q8_0_round_trip.h"
#include "tests/model/small_configs.h"

namespace tessera::train {
namespace {

// The plain model's block matrices through q8_0 and back.
class LoraState : public ::testing::TestWithParam<model::FrozenWeights> {};

TEST_P(LoraState, AdamWGetsThePlainModelsAdapterGradients) {
  model::ModelConfig c = model::small_configs(8).llama;
  c.d_model = 32;  // rows of whole q8_0 blocks
  c.ffn_hidden = 32;
  c.lora.rank = 2;
  c.lora.alpha = 4;
  c.lora.quantize = GetParam();
  const int64_t B = 2, T = 8;
  std::vector<int32_t> x(B * T), y(B * T);
  CounterRng rng(3, 0);
  for (int64_t i = 0; i < B * T; ++i) {
    x[i] = int32_t(rng.below(uint64_t(i), uint64_t(c.vocab_size)));
    y[i] = int32_t(rng.below(uint64_t(i + 1000), uint64_t(c.vocab_size)));
  }
  TrainConfig tc;
  tc.beta1 = 0.5;
  comm::SingleCommunicator alone;
  const comm::Mesh mesh(alone, {});
  TrainState state(kernels::kCpuContext, c, tc, mesh, {}, int64_t{1} << 20);
  model::Transformer trained(c, B, T, true, {.store = &state.store()});
  state.init(7);
  model::Transformer plain(c, B, T, true);
  plain.init_weights(7);
  if (GetParam() == model::FrozenWeights::kQ8_0) {
    model::round_trip_q8_0_matrices(plain.model_layout(), plain.params());
  }
  // Two steps, so that B is no longer zero and A's gradient is not either.
  for (int step = 0; step < 2; ++step) {
    state.zero_grad();
    state.begin_micro_step(true);
    const float loss = runtime::TrainStep(trained).forward_backward(x.data(), y.data(), B, T, 1.0f);
    plain.zero_grad();
    const float expected =
        runtime::TrainStep(plain).forward_backward(x.data(), y.data(), B, T, 1.0f);
    EXPECT_NEAR(loss, expected, 1e-6 * std::abs(expected)) << "step " << step;
    state.reduce_gradients();
    std::map<std::string, const float*> moments;
    for (const NamedTensor& t : state.checkpoint_tensors()) {
      EXPECT_NE(t.name.find(".lora_"), std::string::npos) << t.name << " is not an adapter's";
      moments[t.name] = t.tensor.as<float>();
    }
    const model::ModelLayout& layout = plain.model_layout();
    std::vector<float> m_before(size_t(layout.params.total()), 0.0f);
    for (const model::ParamInfo& p : layout.params.entries()) {
      if (p.offset < layout.adapters_begin) continue;
      const float* m = moments.at(ckpt::state_part_prefix(ckpt::StatePart::kAdamM) + p.name);
      std::copy(m, m + p.shape.numel(), m_before.begin() + p.offset);
    }
    state.update(1e-2, 1.0f);
    int compared = 0;
    for (const NamedTensor& t : state.checkpoint_tensors()) {
      if (t.name.rfind(ckpt::state_part_prefix(ckpt::StatePart::kAdamM), 0) != 0) continue;
      const std::string name =
          t.name.substr(ckpt::state_part_prefix(ckpt::StatePart::kAdamM).size());
      const model::ParamInfo& p = layout.params.find(name);
      const float* m = t.tensor.as<float>();
      for (int64_t i = 0; i < p.shape.numel(); ++i) {
        // m = beta1 m + (1 - beta1) g
        const double g = (m[i] - 0.5 * m_before[p.offset + i]) / 0.5;
        const double want = plain.grads()[p.offset + i];
        EXPECT_NEAR(g, want, 1e-5 + 1e-4 * std::abs(want)) << name << "[" << i << "] step " << step;
        compared += want != 0;
      }
    }
    EXPECT_GT(compared, 0);
    // The plain model takes the same AdamW step on the adapters alone.
    if (step == 0) {
      for (const NamedTensor& t : state.checkpoint_tensors()) {
        if (t.name.find("adamw.") == 0) continue;
        const model::ParamInfo& p = layout.params.find(t.name);
        std::copy(t.tensor.as<float>(), t.tensor.as<float>() + p.shape.numel(),
                  plain.params().begin() + p.offset);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FrozenModel, LoraState,
                         ::testing::Values(model::FrozenWeights::kPrecision,
                                           model::FrozenWeights::kQ8_0),
                         [](const auto& info) { return std::string(enum_name(info.param)); });

}  // namespace
}  // namespace tessera::train
