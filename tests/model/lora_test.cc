// LoRA adapters (train.lora_*): where block_spec and the layout put them, that a fresh adapter
// leaves the model as it was, and that the model's gradients of every target role's A and B match
// finite differences. (The update's own f64 check: tests/kernels/lora_gradient_test.cc; training
// with the base frozen: tests/train/lora_training_test.cc; under mpirun: tests/dist.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tessera/model/lora_merge.h"
#include "tessera/model/parameters.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"
#include "tests/expect_error.h"
#include "tests/model/small_configs.h"
#include "tests/model/whole_model_gradients.h"

namespace tessera::model {
namespace {

ModelConfig with_lora(ModelConfig c, const std::string& targets) {
  c.lora.rank = 2;
  c.lora.alpha = 6;
  c.lora.targets = targets;
  return c;
}

TEST(Lora, AdaptersFollowTheWholeModelInTheLayout) {
  const ModelConfig base = small_configs(8).llama;
  const ModelConfig c = with_lora(base, "attention,mlp");
  const ModelLayout layout = model_layout(c);
  EXPECT_EQ(layout.adapters_begin, model_layout(base).params.total());
  EXPECT_EQ(int64_t(layout.units.size()), 1 + 2 * c.n_layer);
  const auto shape_of = [&](const std::string& name) { return layout.params.find(name).shape; };
  // One block of A per module Hugging Face names: q, k and v; gate and up.
  EXPECT_EQ(shape_of("blocks.0.attn.qkv.lora_a.weight"), (Shape{3 * 2, c.d_model}));
  EXPECT_EQ(shape_of("blocks.0.attn.qkv.lora_b.weight"), (Shape{c.qkv_width(), 2}));
  EXPECT_EQ(shape_of("blocks.1.attn.proj.lora_a.weight"), (Shape{2, c.d_model}));
  EXPECT_EQ(shape_of("blocks.1.attn.proj.lora_b.weight"), (Shape{c.d_model, 2}));
  EXPECT_EQ(shape_of("blocks.0.mlp.gate_up.lora_a.weight"), (Shape{2 * 2, c.d_model}));
  EXPECT_EQ(shape_of("blocks.0.mlp.down.lora_a.weight"), (Shape{2, c.ffn()}));
  for (const ParamInfo& p : layout.params.entries()) {
    const bool adapter = p.name.find(".lora_") != std::string::npos;
    EXPECT_EQ(adapter, p.offset >= layout.adapters_begin) << p.name;
    if (p.name.find(".lora_b") != std::string::npos) EXPECT_EQ(p.init_std, 0.0) << p.name;
  }
  // GPT-2's fused c_attn is one module: one block of A.
  const ModelLayout gpt2 = model_layout(with_lora(small_configs(8).gpt2, "qkv"));
  EXPECT_EQ(gpt2.params.find("blocks.0.attn.qkv.lora_a.weight").shape, (Shape{2, 16}));
  EXPECT_EQ(int64_t(gpt2.params.entries().size() -
                    model_layout(small_configs(8).gpt2).params.entries().size()),
            2 * 2);
}

TEST(Lora, BadTargetsAreRefusedByName) {
  testing::expect_error([] { model_layout(with_lora(small_configs(8).llama, "attention,ffn")); },
                        {"train.lora_targets", "\"ffn\""});
  testing::expect_error([] { model_layout(with_lora(small_configs(8).moe, "attention,mlp")); },
                        {"train.lora_targets", "mixture of experts", "experts"});
  testing::expect_error([] { model_layout(with_lora(small_configs(8).llama, "experts")); },
                        {"train.lora_targets", "no experts"});
  ModelConfig dropped = with_lora(small_configs(8).moe, "experts");
  dropped.lora.dropout = 0.1;
  testing::expect_error([&] { model_layout(dropped); }, {"train.lora_dropout", "experts"});
}

// B starts at zero: the adapted model computes what its base does, to the bit.
TEST(Lora, AFreshAdapterChangesNothing) {
  const ModelConfig base = small_configs(8).llama;
  const int64_t B = 2, T = 8;
  Transformer plain(base, B, T, /*training=*/false);
  Transformer adapted(with_lora(base, "attention,mlp"), B, T, /*training=*/false);
  plain.init_weights(3);
  adapted.init_weights(3);
  std::vector<int32_t> tokens(B * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 7 % base.vocab_size);
  plain.forward(tokens.data(), nullptr, B, T);
  adapted.forward(tokens.data(), nullptr, B, T);
  const int64_t n = B * T * base.vocab_size;
  EXPECT_EQ(std::vector<float>(plain.logits(), plain.logits() + n),
            std::vector<float>(adapted.logits(), adapted.logits() + n));
}

// Random weights (B not zero), then central differences on elements of every adapter's A and B
// against forward_backward's gradient. In f32, as the model runs: h = 2e-3, since the attention's
// softmax bends the loss enough over 1e-2 to move qkv's adapters by a few percent (1e-3 with
// dropout, whose 1 / (1 - p) scaling bends it more, and before a mixture of experts, whose
// SwiGLU experts and gates bend it more), and gradients under 5e-3 are left out, where the loss's
// f32 rounding over 2h is a few percent of them.
void check_adapter_gradients(const ModelConfig& c, uint64_t dropout_key = 0, float h = 2e-3f) {
  const int64_t B = 2, T = 6;
  Transformer model(c, B, T, /*training=*/true);
  std::mt19937 rng(11);
  randomize_for_gradient_check(model, rng);
  RandomBatch batch;
  const std::vector<float> grads = gradients_on_random_batch(model, rng, B, T, batch, dropout_key);

  int compared = 0;
  for (const ParamInfo& info : model.layout().entries()) {
    if (info.offset < model.model_layout().adapters_begin) continue;
    for (int64_t i = 0; i < std::min<int64_t>(info.shape.numel(), 6); ++i) {
      const int64_t at =
          info.offset + i * (info.shape.numel() / 6 > 0 ? info.shape.numel() / 6 : 1);
      const double numeric = central_difference(model, batch.inputs.data(), batch.targets.data(), B,
                                                T, at, h, dropout_key);
      const double analytic = grads[at];
      if (std::abs(analytic) <= 5e-3) continue;
      ++compared;
      EXPECT_LT(std::abs(numeric - analytic) / std::abs(analytic), 2e-2)
          << info.name << "[" << at - info.offset << "]: finite difference " << numeric
          << ", backward " << analytic;
    }
  }
  EXPECT_GE(compared, 12) << c.lora.targets << ": too few gradients above the 5e-3 floor";
}

TEST(Lora, GradientsOfEveryRoleMatchFiniteDifferences) {
  for (const std::string target : {"qkv", "attn_out", "mlp_in", "mlp_out"}) {
    SCOPED_TRACE(target);
    check_adapter_gradients(with_lora(small_configs(8).llama, target));
    check_adapter_gradients(with_lora(small_configs(8).gpt2, target));
  }
  // A mixture of experts' attention and experts, its router and experts frozen.
  check_adapter_gradients(with_lora(small_configs(8).moe, "attention"), 0, 1e-3f);
  for (const std::string target : {"experts_in", "experts_out"}) {
    SCOPED_TRACE(target);
    check_adapter_gradients(with_lora(small_configs(8).moe, target));
  }
}

ModelConfig with_dropout(ModelConfig c, double p) {
  c.lora.dropout = p;
  return c;
}

// With dropout, a pass of one key is one function of the weights: its gradients, through the
// masks on the adapters' inputs and on their input gradients, match its finite differences.
TEST(Lora, GradientsThroughDropoutMatchFiniteDifferences) {
  for (const std::string target : {"qkv", "attn_out", "mlp_in", "mlp_out"}) {
    SCOPED_TRACE(target);
    check_adapter_gradients(with_dropout(with_lora(small_configs(8).llama, target), 0.3), 77,
                            1e-3f);
  }
}

// Dropout acts only in a pass with a key: without one the model computes what it does without
// dropout, to the bit; a key draws the same masks each time, and another key others.
TEST(Lora, DropoutActsOnlyInPassesWithAKey) {
  const ModelConfig plain = with_lora(small_configs(8).llama, "attention,mlp");
  const ModelConfig dropped = with_dropout(plain, 0.5);
  const int64_t B = 2, T = 8, n = B * T * plain.vocab_size;
  Transformer without(plain, B, T, /*training=*/true), with(dropped, B, T, /*training=*/true);
  std::mt19937 rng(5);
  randomize_for_gradient_check(without, rng);
  std::copy(without.params().begin(), without.params().end(), with.params().begin());
  std::vector<int32_t> tokens(B * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 5 % plain.vocab_size);
  const auto logits = [&](Transformer& m, uint64_t key) {
    m.forward(tokens.data(), nullptr, B, T, key);
    return std::vector<float>(m.logits(), m.logits() + n);
  };
  const std::vector<float> reference = logits(without, 9);
  EXPECT_EQ(logits(with, 0), reference);
  const std::vector<float> first = logits(with, 9);
  EXPECT_NE(first, reference);
  EXPECT_EQ(logits(with, 9), first);
  EXPECT_NE(logits(with, 10), first);
}

// Folded into the weights, every adapter of every role gives the logits the adapted model gives.
TEST(Lora, MergedWeightsGiveTheAdaptedLogits) {
  for (const ModelConfig& c : {with_lora(small_configs(8).llama, "attention,mlp"),
                               with_lora(small_configs(8).gpt2, "attention,mlp"),
                               with_lora(small_configs(8).moe, "attention,experts")}) {
    const ModelConfig& base = c;
    const int64_t B = 2, T = 8, n = B * T * c.vocab_size;
    Transformer adapted(c, B, T, /*training=*/false);
    std::mt19937 rng(4);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    for (float& p : adapted.params()) p = normal(rng);
    std::vector<int32_t> tokens(B * T);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(i * 5 % c.vocab_size);
    adapted.forward(tokens.data(), nullptr, B, T);
    const std::vector<float> expected(adapted.logits(), adapted.logits() + n);

    const MergedModel merged = merge_lora(c, adapted.params());
    EXPECT_FALSE(merged.config.lora.enabled());
    Transformer plain(merged.config, B, T, /*training=*/false);
    ASSERT_EQ(plain.params().size(), merged.params.size());
    std::copy(merged.params.begin(), merged.params.end(), plain.params().begin());
    plain.forward(tokens.data(), nullptr, B, T);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < n; ++i) {
      worst = std::max(worst, double(std::abs(plain.logits()[i] - expected[i])));
      scale = std::max(scale, double(std::abs(expected[i])));
    }
    EXPECT_LT(worst, 1e-5 * scale) << enum_name(base.arch) << ": largest logit " << scale;
    // The merge changed the weights: the plain model alone computes something else.
    Transformer unmerged(merged.config, B, T, /*training=*/false);
    std::copy(adapted.params().begin(), adapted.params().begin() + int64_t(merged.params.size()),
              unmerged.params().begin());
    unmerged.forward(tokens.data(), nullptr, B, T);
    EXPECT_GT(
        std::abs(unmerged.logits()[0] - expected[0]) + std::abs(unmerged.logits()[7] - expected[7]),
        1e-3);
  }
}

}  // namespace
}  // namespace tessera::model
