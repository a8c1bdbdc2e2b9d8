// A mixture of one expert with top-1 routing is the dense SwiGLU MLP: same loss, same gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/model/parameters.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"

namespace tessera::model {
namespace {

TEST(MoeEquivalence, OneExpertTopOneIsTheDenseMlp) {
  ModelConfig dense;
  dense.arch = Architecture::kLlama;
  dense.vocab_size = 41;
  dense.n_layer = 2;
  dense.n_head = 4;
  dense.n_kv_head = 2;
  dense.d_model = 32;
  dense.ffn_hidden = 40;
  dense.max_seq = 16;
  dense.tie_embeddings = false;
  ModelConfig moe = dense;
  moe.moe.n_experts = 1;
  moe.moe.top_k = 1;
  moe.moe.aux_loss_coef = 0;
  const int64_t B = 2, T = 11;

  Transformer a(dense, B, T, /*training=*/true);
  Transformer b(moe, B, T, /*training=*/true);
  a.init_weights(5);
  b.init_weights(9);
  // Every dense parameter has an MoE twin: the same name, or mlp.* -> moe.experts.*.
  auto moe_name = [](std::string name) {
    const auto at = name.find(".mlp.");
    return at == std::string::npos ? name : name.replace(at, 5, ".moe.experts.");
  };
  for (const ParamInfo& p : a.layout().entries()) {
    const ParamInfo& q = b.layout().find(moe_name(p.name));
    ASSERT_EQ(p.shape.numel(), q.shape.numel()) << p.name;
    std::memcpy(b.params().data() + q.offset, a.params().data() + p.offset,
                sizeof(float) * p.shape.numel());
  }

  CounterRng rng(11, 0);
  std::vector<int32_t> x(B * T), y(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    x[i] = int32_t(rng.below(2 * i, dense.vocab_size));
    y[i] = int32_t(rng.below(2 * i + 1, dense.vocab_size));
  }
  a.zero_grad();
  b.zero_grad();
  const float loss_a = runtime::TrainStep(a).forward_backward(x.data(), y.data(), B, T, 1.0f);
  const float loss_b = runtime::TrainStep(b).forward_backward(x.data(), y.data(), B, T, 1.0f);
  EXPECT_NEAR(loss_b, loss_a, 1e-6 * std::abs(loss_a));
  EXPECT_EQ(b.aux_loss(), 0.0);
  for (const ParamInfo& p : a.layout().entries()) {
    const ParamInfo& q = b.layout().find(moe_name(p.name));
    double diff = 0, ref = 0;
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      const double ga = a.grads()[p.offset + i], gb = b.grads()[q.offset + i];
      diff += (ga - gb) * (ga - gb);
      ref += ga * ga;
    }
    EXPECT_LE(std::sqrt(diff), 1e-6 * std::sqrt(ref)) << p.name;
  }
  // The router's only signal is the (disabled) balancing loss: its gradient is zero.
  const ParamInfo& router = b.layout().find("blocks.0.moe.router.weight");
  for (int64_t i = 0; i < router.shape.numel(); ++i) {
    ASSERT_EQ(b.grads()[router.offset + i], 0.0f);
  }
}

}  // namespace
}  // namespace tessera::model
