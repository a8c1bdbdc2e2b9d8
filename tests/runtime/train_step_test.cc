// The training step: a whole model's forward, loss and backward over one batch, timed by phase.
#include "tessera/runtime/train_step.h"

#include <gtest/gtest.h>

#include <vector>

#include "tessera/core/rng.h"
#include "tessera/model/transformer.h"
#include "tests/model/small_configs.h"

namespace tessera::runtime {
namespace {

constexpr int64_t kB = 2, kT = 8;

TEST(TrainStep, ItsLossIsTheForwardsAndItsPhasesAreTimedApart) {
  const model::SmallConfigs small = model::small_configs(kT);
  for (const model::ModelConfig& c : {small.gpt2, small.moe}) {
    model::Transformer m(c, kB, kT, /*training=*/true);
    m.init_weights(3);
    m.zero_grad();
    const CounterRng rng(9, 0);
    std::vector<int32_t> x(kB * kT), y(kB * kT);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = int32_t(rng.below(2 * i, uint64_t(c.vocab_size)));
      y[i] = int32_t(rng.below(2 * i + 1, uint64_t(c.vocab_size)));
    }
    const float forward_only = m.forward(x.data(), y.data(), kB, kT);
    TrainStep step(m);
    EXPECT_FLOAT_EQ(step.forward_backward(x.data(), y.data(), kB, kT, 1.0f), forward_only);
    double gradient_norm = 0;
    for (const float g : m.grads()) gradient_norm += double(g) * g;
    EXPECT_GT(gradient_norm, 0);
    const PhaseSeconds first = step.phase_seconds();
    EXPECT_GT(first.forward, 0);
    EXPECT_GT(first.backward, 0);
    EXPECT_EQ(first.forward_communication + first.backward_communication, 0);  // one rank
    step.forward_backward(x.data(), y.data(), kB, kT, 1.0f);
    EXPECT_GT(step.phase_seconds().forward, first.forward);
    EXPECT_GT(step.phase_seconds().backward, first.backward);
  }
}

}  // namespace
}  // namespace tessera::runtime
