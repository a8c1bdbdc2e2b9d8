// QK-norm (model.qk_norm), a part of block_spec: its gains are parameters the layout and the
// parameter count hold, forward uses them, and backward's gradients match finite differences.
// (Its export: tests/interop/hf_names_test.cc and llama.cpp's qwen3 in tests/e2e; its planning:
// tests/plan/cost_model_test.cc; a CUDA device's refusal: device_support_test.cc.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tessera/model/parameters.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"
#include "tests/model/whole_model_gradients.h"

namespace tessera::model {
namespace {

ModelConfig qwen_like() {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.vocab_size = 13;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.d_model = 16;
  c.ffn_hidden = 24;
  c.max_seq = 8;
  c.tie_embeddings = false;
  c.qk_norm = true;
  return c;
}

TEST(QkNorm, AddsTwoGainsOfAHeadsWidthPerBlock) {
  ModelConfig plain = qwen_like();
  plain.qk_norm = false;
  const ModelConfig c = qwen_like();
  const int64_t head_dim = c.head_dim();
  EXPECT_EQ(count_parameters(c).total - count_parameters(plain).total, 2 * head_dim * c.n_layer);
  const ModelLayout layout = model_layout(c);
  EXPECT_EQ(layout.params.find("blocks.1.attn.q_norm.weight").shape.numel(), head_dim);
  EXPECT_EQ(layout.params.find("blocks.1.attn.k_norm.weight").shape.numel(), head_dim);
}

// Random weights with gains around 1, then central differences (h = 1e-2, as the GPT-2 spot
// check) on every gain element and some q/k rows against forward_backward's gradient.
TEST(QkNorm, GradientsMatchFiniteDifferences) {
  const ModelConfig c = qwen_like();
  const int64_t B = 2, T = 6;
  Transformer model(c, B, T, /*training=*/true);
  std::mt19937 rng(5);
  randomize_for_gradient_check(model, rng);
  RandomBatch batch;
  const std::vector<float> grads = gradients_on_random_batch(model, rng, B, T, batch);

  const float h = 1e-2f;
  int compared = 0;
  for (const std::string name :
       {"blocks.0.attn.q_norm.weight", "blocks.0.attn.k_norm.weight", "blocks.1.attn.q_norm.weight",
        "blocks.1.attn.k_norm.weight", "blocks.0.attn.qkv.weight"}) {
    const ParamInfo& info = model.layout().find(name);
    for (int64_t i = 0; i < std::min<int64_t>(info.shape.numel(), 8); ++i) {
      const int64_t at = info.offset + i;
      const double numeric =
          central_difference(model, batch.inputs.data(), batch.targets.data(), B, T, at, h);
      const double analytic = grads[at];
      if (std::abs(analytic) <= 1e-3) continue;
      ++compared;
      EXPECT_LT(std::abs(numeric - analytic) / std::abs(analytic), 2e-2)
          << name << "[" << i << "]: finite difference " << numeric << ", backward " << analytic;
    }
  }
  EXPECT_GE(compared, 24) << "too few gradients above the 1e-3 floor";
}

}  // namespace
}  // namespace tessera::model
