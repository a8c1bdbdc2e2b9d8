// The inference model (one shared set of activations, only the last row projected to logits)
// gives the same next-token logits as the training model's full forward.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/model/transformer.h"
#include "tests/model/small_configs.h"

namespace tessera::model {
namespace {

TEST(Inference, NextTokenLogitsEqualTheTrainingForward) {
  const auto [gpt2, llama, moe] = small_configs(12);
  for (const ModelConfig& c : {gpt2, llama, moe}) {
    SCOPED_TRACE(std::string(enum_name(c.arch)) + (c.is_moe() ? " moe" : ""));
    const int64_t T = 10;
    Transformer train(c, 1, T, /*training=*/true);
    Transformer infer(c, 1, c.max_seq, /*training=*/false);
    train.init_weights(3);
    std::memcpy(infer.params().data(), train.params().data(), train.params().size_bytes());
    std::vector<int32_t> tokens(T);
    for (int64_t i = 0; i < T; ++i) tokens[i] = int32_t((7 * i + 3) % c.vocab_size);
    train.forward(tokens.data(), nullptr, 1, T);
    const float* last_row = train.logits() + (T - 1) * c.vocab_size;
    const float* next = infer.next_token_logits(tokens.data(), T);
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      ASSERT_NEAR(next[v], last_row[v], 1e-5) << "vocab entry " << v;
    }
  }
}

}  // namespace
}  // namespace tessera::model
