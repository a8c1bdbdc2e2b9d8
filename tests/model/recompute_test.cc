// Activation recomputation: gradients bit-identical to keeping everything, and the memory kept
// per block equal to the documented formula (docs/memory.md), falling none > selective > full.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/execution.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"

namespace tessera::model {
namespace {

ModelConfig small(Architecture arch, int64_t experts) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 37;
  c.n_layer = 3;
  c.n_head = 4;
  c.d_model = 32;
  c.max_seq = 16;
  if (arch == Architecture::kLlama) {
    c.n_kv_head = 2;
    c.ffn_hidden = 48;
    c.tie_embeddings = false;
    c.moe.n_experts = experts;
    c.moe.top_k = 2;
    c.moe.n_shared = experts > 0 ? 1 : 0;
  }
  return c;
}

struct Case {
  const char* name;
  ModelConfig config;
};

std::vector<Case> cases() {
  ModelConfig qk_norm = small(Architecture::kLlama, 0);
  qk_norm.qk_norm = true;
  return {{"gpt2", small(Architecture::kGpt2, 0)},
          {"llama", small(Architecture::kLlama, 0)},
          {"qk_norm", qk_norm},
          {"moe", small(Architecture::kLlama, 4)}};
}

std::vector<float> gradients(const ModelConfig& c, Recompute r, Precision p,
                             const std::vector<int32_t>& x, const std::vector<int32_t>& y,
                             int64_t B, int64_t T, float* loss) {
  Transformer model(c, B, T, /*training=*/true, {.precision = p, .recompute = r});
  model.init_weights(7);
  model.zero_grad();
  *loss = runtime::TrainStep(model).forward_backward(x.data(), y.data(), B, T, 1.0f);
  return {model.grads().begin(), model.grads().end()};
}

TEST(Recompute, GradientsAreBitIdenticalToKeepingEverything) {
  const int64_t B = 2, T = 9;
  for (const Case& test : cases()) {
    SCOPED_TRACE(test.name);
    CounterRng rng(3, 0);
    std::vector<int32_t> x(B * T), y(B * T);
    for (int64_t i = 0; i < B * T; ++i) {
      x[i] = int32_t(rng.below(2 * i, test.config.vocab_size));
      y[i] = int32_t(rng.below(2 * i + 1, test.config.vocab_size));
    }
    for (Precision p : {Precision::kF32, Precision::kBf16}) {
      float loss_none = 0;
      const auto none = gradients(test.config, Recompute::kNone, p, x, y, B, T, &loss_none);
      for (Recompute r : {Recompute::kSelective, Recompute::kFull}) {
        SCOPED_TRACE(std::string(enum_name(r)) + " " + std::string(enum_name(p)));
        float loss = 0;
        const auto g = gradients(test.config, r, p, x, y, B, T, &loss);
        EXPECT_EQ(loss, loss_none);
        ASSERT_EQ(g.size(), none.size());
        EXPECT_EQ(std::memcmp(g.data(), none.data(), g.size() * sizeof(float)), 0);
      }
    }
  }
}

TEST(Recompute, KeptActivationsFollowTheFormula) {
  const int64_t B = 3, T = 16;
  for (const Case& test : cases()) {
    for (Precision p : {Precision::kF32, Precision::kBf16}) {
      int64_t previous = 0;
      for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        SCOPED_TRACE(std::string(test.name) + " " + std::string(enum_name(p)) + " " +
                     std::string(enum_name(r)));
        Transformer model(test.config, B, T, /*training=*/true, {.precision = p, .recompute = r});
        const int64_t kept = model.saved_activation_bytes_per_layer();
        EXPECT_EQ(kept, saved_activation_bytes_per_layer(test.config, B * T, p, r));
        if (previous > 0) {
          EXPECT_LT(kept, previous);
        }
        previous = kept;
      }
    }
  }
}

// The documented formula for GPT-2, evaluated by hand for N tokens.
TEST(Recompute, Gpt2FormulaByHand) {
  ModelConfig c = small(Architecture::kGpt2, 0);
  const int64_t N = 48, C = c.d_model, H = c.n_head;
  // Kept: res_out C; qkv 3C, lse H, res_mid C, fc 4C, LayerNorm stats 4; ln1 C, atty C, ln2 C,
  // gelu 4C.
  EXPECT_EQ(saved_activation_bytes_per_layer(c, N, Precision::kF32, Recompute::kNone),
            4 * N * (16 * C + H + 4));
  // Selective drops ln1, ln2 and the GELU output.
  EXPECT_EQ(saved_activation_bytes_per_layer(c, N, Precision::kF32, Recompute::kSelective),
            4 * N * (10 * C + H + 4));
  // bf16 halves the matmul inputs (ln1, atty, ln2, gelu).
  EXPECT_EQ(saved_activation_bytes_per_layer(c, N, Precision::kBf16, Recompute::kNone),
            4 * N * (9 * C + H + 4) + 2 * N * 7 * C);
  EXPECT_EQ(saved_activation_bytes_per_layer(c, N, Precision::kF32, Recompute::kFull), 4 * N * C);
}

}  // namespace
}  // namespace tessera::model
