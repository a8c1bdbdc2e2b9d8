// Packed documents and ignored targets in a training model: a document's logits do not depend on
// the documents packed before it, and the loss and its gradients count only the trained targets.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/targets.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/train_step.h"
#include "tests/model/small_configs.h"

namespace tessera::model {
namespace {

constexpr int64_t kT = 12;
constexpr int32_t kSeparator = 0;

// Row 0 packs document A (positions 0-4), the separator (5) and document B (6-11); row 1 is one
// document. `a` picks A's tokens.
std::vector<int32_t> packed_rows(int32_t a) {
  std::vector<int32_t> x(2 * kT);
  for (int64_t t = 0; t < kT; ++t) {
    x[t] = t < 5 ? int32_t(1 + (a * 7 + t * 3) % 20) : t == 5 ? kSeparator : int32_t(3 + t);
    x[kT + t] = int32_t(1 + (t * 5) % 27);
  }
  return x;
}

std::vector<float> logits(const ModelConfig& c, const std::vector<int32_t>& x, int64_t B, int64_t T,
                          bool document_mask) {
  ModelOptions o;
  if (document_mask) o.document_separator = kSeparator;
  Transformer model(c, 2, kT, /*training=*/true, o);
  model.init_weights(3);
  model.forward(x.data(), nullptr, B, T);
  return {model.logits(), model.logits() + B * T * c.vocab_size};
}

TEST(PackedDocuments, ADocumentDoesNotSeeTheDocumentsBeforeIt) {
  const SmallConfigs s = small_configs(kT);
  for (const ModelConfig& c : {s.gpt2, s.llama}) {
    const int64_t V = c.vocab_size;
    const std::vector<float> one = logits(c, packed_rows(1), 2, kT, true);
    const std::vector<float> other = logits(c, packed_rows(2), 2, kT, true);
    for (int64_t i = 6 * V; i < 2 * kT * V; ++i) ASSERT_EQ(one[i], other[i]) << i;
    EXPECT_NE(one[0], other[0]);
    // Without the mask, document B reads A.
    const std::vector<float> unmasked_one = logits(c, packed_rows(1), 2, kT, false);
    const std::vector<float> unmasked_other = logits(c, packed_rows(2), 2, kT, false);
    EXPECT_NE(unmasked_one[6 * V], unmasked_other[6 * V]);
  }
  // Rotary positions are relative, so a Llama document packed at position 6 reads as it does
  // alone at position 0.
  const std::vector<int32_t> packed = packed_rows(1);
  const std::vector<int32_t> alone(packed.begin() + 6, packed.begin() + kT);
  const std::vector<float> in_row = logits(s.llama, packed, 2, kT, true);
  const std::vector<float> by_itself = logits(s.llama, alone, 1, 6, true);
  for (int64_t i = 0; i < 6 * s.llama.vocab_size; ++i) {
    ASSERT_NEAR(in_row[6 * s.llama.vocab_size + i], by_itself[i], 1e-5) << i;
  }
}

struct Gradients {
  float loss;
  std::vector<float> grads;
};

Gradients train_step(const ModelConfig& c, const std::vector<int32_t>& x,
                     const std::vector<int32_t>& y) {
  Transformer model(c, 2, kT, /*training=*/true, {.document_separator = kSeparator});
  model.init_weights(5);
  model.zero_grad();
  const float loss = runtime::TrainStep(model).forward_backward(x.data(), y.data(), 2, kT, 1.0f);
  return {loss, {model.grads().begin(), model.grads().end()}};
}

// The mean loss over a set of targets is the sum of its rows' losses over its size, so for a
// split of the targets into A and B: |A| L(A) + |B| L(B) = N L(all), for the losses and their
// gradients alike. An ignored row that leaked into either would break it.
TEST(IgnoredTargets, TheLossAndGradientsCountOnlyTrainedTargets) {
  const SmallConfigs s = small_configs(kT);
  for (const ModelConfig& c : {s.gpt2, s.llama}) {
    const std::vector<int32_t> x = packed_rows(1);
    std::vector<int32_t> all(2 * kT), first(2 * kT, kIgnoredTarget), rest(2 * kT, kIgnoredTarget);
    int64_t in_first = 0;
    for (int64_t i = 0; i < 2 * kT; ++i) {
      all[i] = int32_t((i * 11 + 4) % c.vocab_size);
      if (i % 3 == 0) {
        first[i] = all[i];
        ++in_first;
      } else {
        rest[i] = all[i];
      }
    }
    const int64_t n = 2 * kT, in_rest = n - in_first;
    const Gradients whole = train_step(c, x, all), a = train_step(c, x, first),
                    b = train_step(c, x, rest);
    EXPECT_NEAR(double(in_first) * a.loss + double(in_rest) * b.loss, double(n) * whole.loss,
                1e-4 * n);
    for (size_t i = 0; i < whole.grads.size(); ++i) {
      ASSERT_NEAR(double(in_first) * a.grads[i] + double(in_rest) * b.grads[i],
                  double(n) * whole.grads[i], 1e-4)
          << i;
    }
    std::vector<int32_t> out_of_vocabulary = all;
    out_of_vocabulary[3] = int32_t(c.vocab_size);
    EXPECT_THROW(train_step(c, x, out_of_vocabulary), Error);
  }
}

TEST(PackedDocuments, AreForTraining) {
  const SmallConfigs s = small_configs(kT);
  EXPECT_THROW(Transformer(s.gpt2, 1, kT, /*training=*/false, {.document_separator = 0}), Error);
}

}  // namespace
}  // namespace tessera::model
