// Inference with quantised weights (ModelOptions.weights = kInt8, kQ4_0 or kQ4_K): every matmul
// multiplies the quantised matrices by quantised activations, the results follow the f32 model
// closely and do not depend on how many rows arrive at once, and what a format cannot serve is
// refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/kernels/q4_linear.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/decoder.h"
#include "tests/expect_error.h"
#include "tests/model/small_configs.h"

namespace tessera::model {
namespace {

// Shapes wide enough for quantisation error to average out as it does in real models. At
// d_model 256 the Llama's MLP output projection reads rows of 384, which a q4_k model holds in
// q4_0.
std::vector<ModelConfig> wide_configs(int64_t d_model = 64) {
  auto [gpt2, llama, moe] = small_configs(32);
  for (ModelConfig* c : {&gpt2, &llama}) {
    c->vocab_size = 97;
    c->d_model = d_model;
    c->ffn_hidden = c == &llama ? 3 * d_model / 2 : 0;
  }
  return {gpt2, llama};
}

// A quantised format and how closely its logits follow the f32 model's on the shapes below.
struct Format {
  WeightFormat weights;
  // The largest move of a logit, as a share of the f32 logits' spread, and the greedy choices
  // that must agree, in tenths.
  double logit_move;
  int64_t agree_tenths;
  int64_t d_model;  // of the models below: q4_k's super-blocks need rows of 256
};

// int8: each weight moves by at most half a step, 1/254 of its row's largest magnitude, each
// activation likewise within its row, and the independent errors partly cancel in every dot
// product: measured, the logits move by at most 0.8% of their spread (0.5% with f32
// activations), so 2% leaves room. q4_0: a weight's step is 1/8 of its block's largest magnitude,
// 16 times int8's (the head stays int8): measured up to 3.9%, so 8%; with these untrained models'
// flat logits, 26 of 27 greedy choices agreed. q4_k, at d_model 256 (its super-blocks need rows of
// 256), where these untrained models' logits are flatter still: measured up to 8.7%, with 19 of 27
// greedy choices on the Llama (q4_0 at that width: 12.0%, also 19 of 27), so 12% and 7 tenths.
constexpr Format kFormats[] = {{WeightFormat::kInt8, 0.02, 9, 64},
                               {WeightFormat::kQ4_0, 0.08, 8, 64},
                               {WeightFormat::kQ4_K, 0.12, 7, 256}};

class QuantizedWeights : public ::testing::TestWithParam<Format> {
 protected:
  static ModelOptions options() { return {.weights = GetParam().weights}; }
  static std::string name() { return std::string(enum_name(GetParam().weights)); }
  static std::vector<ModelConfig> configs() { return wide_configs(GetParam().d_model); }
};

INSTANTIATE_TEST_SUITE_P(Formats, QuantizedWeights, ::testing::ValuesIn(kFormats),
                         [](const auto& info) {
                           return std::string(enum_name(info.param.weights));
                         });

// One sequence, its positions in blocks 0, 1, 2, ... of a cache that holds the whole context.
class OneSequenceCache {
 public:
  static constexpr int64_t kBlockTokens = 4;
  explicit OneSequenceCache(const ModelConfig& c) {
    const int64_t blocks = (c.max_seq + kBlockTokens - 1) / kBlockTokens;
    const int64_t layer = blocks * kBlockTokens * c.kv_heads() * c.head_dim();
    storage_.assign(2 * c.n_layer * layer, 0.0f);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      k_.push_back(storage_.data() + 2 * l * layer);
      v_.push_back(storage_.data() + (2 * l + 1) * layer);
    }
    for (int64_t b = 0; b < blocks; ++b) table_.push_back(int32_t(b));
  }
  // Runs tokens [start, end) through the model and returns its next-token logits.
  const float* decode(Transformer& model, const std::vector<int32_t>& tokens, int64_t start,
                      int64_t end) const {
    const runtime::DecodeChunk chunk{tokens.data() + start, end - start, start, table_};
    return runtime::Decoder(model).decode({k_, v_, kBlockTokens}, {&chunk, 1});
  }

 private:
  std::vector<float> storage_;
  std::vector<void*> k_, v_;
  std::vector<int32_t> table_;
};

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

// The quantised model's logits against the f32 model's, step by step along the f32 model's greedy
// continuation of a prompt (so that one early disagreement does not change every later input).
TEST_P(QuantizedWeights, DecodeFollowsTheF32ModelClosely) {
  for (const ModelConfig& c : configs()) {
    SCOPED_TRACE(enum_name(c.arch));
    Transformer f32(c, 1, c.max_seq, /*training=*/false);
    Transformer quantized(c, 1, c.max_seq, /*training=*/false, options());
    f32.init_weights(7);
    quantized.init_weights(7);
    OneSequenceCache f32_cache(c), quantized_cache(c);
    std::vector<int32_t> tokens = {3, 14, 15, 92, 65};
    const int64_t V = c.vocab_size, prompt = int64_t(tokens.size());
    int64_t agree = 0, steps = 0;
    double worst = 0;
    for (int64_t end = prompt; end < c.max_seq; ++end) {
      const int64_t start = end == prompt ? 0 : end - 1;
      const float* f = f32_cache.decode(f32, tokens, start, end);
      const std::vector<float> reference(f, f + V);
      const float* q = quantized_cache.decode(quantized, tokens, start, end);
      const auto [lo, hi] = std::minmax_element(reference.begin(), reference.end());
      double diff = 0;
      for (int64_t v = 0; v < V; ++v) diff = std::max(diff, double(std::fabs(q[v] - reference[v])));
      worst = std::max(worst, diff / (*hi - *lo));
      const int64_t next = argmax(reference.data(), V);
      agree += argmax(q, V) == next;
      ++steps;
      tokens.push_back(int32_t(next));
    }
    // Greedy choices may flip only where the top two logits nearly tie.
    std::printf(
        "%s: logits moved by up to %.2f%% of their spread; %lld of %lld greedy tokens "
        "agree\n",
        name().c_str(), 100 * worst, (long long)agree, (long long)steps);
    EXPECT_GT(worst, 0) << "the quantised model computed with the f32 weights";
    EXPECT_LT(worst, GetParam().logit_move);
    EXPECT_GE(agree, steps * GetParam().agree_tenths / 10) << "of " << steps << " greedy tokens";
  }
}

// A prefill multiplies its rows at once (int8: in one GEMM), decoding one row at a time (int8: in
// the skinny kernel): both sum the same integers, so the model's logits for a sequence agree
// whichever way it arrives, up to the f32 rounding of the attention and norms around the matmuls
// (which can move an activation across a quantisation boundary now and then).
TEST_P(QuantizedWeights, APrefillAndTokenByTokenDecodingAgree) {
  for (const ModelConfig& c : configs()) {
    SCOPED_TRACE(enum_name(c.arch));
    const int64_t T = c.max_seq, V = c.vocab_size;  // 32 rows: the GEMM takes them
    Transformer quantized(c, 1, c.max_seq, /*training=*/false, options());
    quantized.init_weights(5);
    std::vector<int32_t> tokens(T);
    for (int64_t i = 0; i < T; ++i) tokens[i] = int32_t((11 * i + 2) % V);
    const OneSequenceCache prefill_cache(c), step_cache(c);
    const float* p = prefill_cache.decode(quantized, tokens, 0, T);
    const std::vector<float> prefill(p, p + V);
    const float* d = nullptr;
    for (int64_t end = 1; end <= T; ++end) d = step_cache.decode(quantized, tokens, end - 1, end);
    const auto [lo, hi] = std::minmax_element(prefill.begin(), prefill.end());
    double worst = 0;
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, double(std::fabs(d[v] - prefill[v])));
    EXPECT_LE(worst / (*hi - *lo), 1e-6);  // measured: 0
    EXPECT_EQ(std::max_element(d, d + V) - d, std::max_element(p, p + V) - p);
  }
}

TEST_P(QuantizedWeights, ParametersWrittenAfterUseAreQuantizedAgain) {
  const ModelConfig c = configs()[0];
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  Transformer reused(c, 1, c.max_seq, /*training=*/false, options());
  Transformer fresh(c, 1, c.max_seq, /*training=*/false, options());
  reused.init_weights(1);
  reused.next_token_logits(tokens.data(), 4);
  reused.init_weights(2);
  fresh.init_weights(2);
  const float* got = reused.next_token_logits(tokens.data(), 4);
  const std::vector<float> want(got, got + c.vocab_size);
  got = fresh.next_token_logits(tokens.data(), 4);
  for (int64_t v = 0; v < c.vocab_size; ++v) ASSERT_EQ(want[v], got[v]) << "vocab entry " << v;
}

// Matmul weights are every matrix but the position table, and the token embedding only when it
// is also the head.
TEST_P(QuantizedWeights, ReportsTheWeightBytesEachTokenReads) {
  for (const ModelConfig& c : configs()) {
    SCOPED_TRACE(enum_name(c.arch));
    int64_t values = 0, quantized_bytes = 0;
    const ModelLayout layout = model_layout(c);
    for (const ParamInfo& p : layout.params.entries()) {
      if (p.shape.rank() != 2 || p.name == "wpe.weight") continue;
      if (p.name == "wte.weight" && !c.tie_embeddings) continue;
      const int64_t rows = p.shape[0], cols = p.shape[1];
      values += rows * cols;
      // int8 (and a 4-bit model's head): a byte a value and an f32 scale a row. q4_0 (and a
      // q4_k model's rows that are not whole super-blocks): rows in groups of 16, half a byte a
      // value and an f16 scale a block of 32. q4_k: 2368 bytes a group and super-block of 256.
      const bool head = p.name == (c.tie_embeddings ? "wte.weight" : "lm_head.weight");
      const int64_t padded = (rows + 15) / 16 * 16;
      const WeightFormat format = GetParam().weights;
      if (format == WeightFormat::kInt8 || head) {
        quantized_bytes += rows * cols + 4 * rows;
      } else if (format == WeightFormat::kQ4_K && cols % 256 == 0) {
        quantized_bytes += padded / 16 * (cols / 256) * 2368;
      } else {
        quantized_bytes += padded * cols / 2 + 2 * padded * (cols / 32);
      }
    }
    const int64_t total = layout.params.total();
    const Transformer f32(c, 1, 8, /*training=*/false);
    const Transformer bf16(c, 1, 8, /*training=*/false, {.precision = Precision::kBf16});
    const Transformer quantized(c, 1, 8, /*training=*/false, options());
    EXPECT_EQ(f32.matmul_weight_bytes_per_token(), 4 * values);
    EXPECT_EQ(bf16.matmul_weight_bytes_per_token(), 2 * values);
    EXPECT_EQ(quantized.matmul_weight_bytes_per_token(), quantized_bytes);
    EXPECT_EQ(f32.resident_parameter_bytes(), 4 * total);
    EXPECT_EQ(bf16.resident_parameter_bytes(), 6 * total);
    EXPECT_EQ(quantized.resident_parameter_bytes(), 4 * total + quantized_bytes);
  }
}

TEST_P(QuantizedWeights, RefusesWhatItCannotServe) {
  const SmallConfigs configs = small_configs(16);
  const ModelConfig &gpt2 = configs.gpt2, &moe = configs.moe;
  testing::expect_error([&] { Transformer(gpt2, 1, 16, /*training=*/true, options()); },
                        {name(), "training=false"});
  testing::expect_error([&] { Transformer(moe, 1, 16, /*training=*/false, options()); },
                        {name(), "dense MLPs", "model.moe.n_experts"});
  testing::expect_error(
      [&] {
        Transformer(gpt2, 1, 16, /*training=*/false,
                    {.precision = Precision::kBf16, .weights = GetParam().weights});
      },
      {name(), "precision f32", "bf16"});
  ResidentParameters store(kernels::kCpuContext, model_layout(gpt2), std::nullopt,
                           /*with_gradients=*/false);
  testing::expect_error(
      [&] {
        Transformer(gpt2, 1, 16, /*training=*/false,
                    {.weights = GetParam().weights, .store = &store});
      },
      {name(), "without a parameter store"});
  testing::expect_error(
      [] { enum_from_name<WeightFormat>("int4", "--quantize"); },
      {"--quantize must be \"none\", \"int8\", \"q4_0\" or \"q4_k\", got \"int4\""});
}

TEST(Q4Weights, RefusesAMatrixWhoseRowsAreNotWholeBlocks) {
  ModelConfig c = wide_configs()[1];
  c.ffn_hidden = 80;  // the MLP's output projection reads rows of 80
  for (const WeightFormat format : {WeightFormat::kQ4_0, WeightFormat::kQ4_K}) {
    testing::expect_error([&] { Transformer(c, 1, 8, /*training=*/false, {.weights = format}); },
                          {std::string(enum_name(format)) + " weights", "blocks of 32 columns",
                           "blocks.0.mlp.down.weight", "80 columns"});
  }
}

TEST_P(QuantizedWeights, NamesAMatrixThatCannotBeQuantized) {
  const ModelConfig c = configs()[1];
  Transformer model(c, 1, c.max_seq, /*training=*/false, options());
  model.init_weights(3);
  const ParamInfo& fc = model.layout().find("blocks.1.mlp.gate_up.weight");
  model.params()[fc.offset + 5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int32_t> tokens = {1, 2};
  testing::expect_error([&] { model.next_token_logits(tokens.data(), 2); },
                        {"blocks.1.mlp.gate_up.weight", "inf or NaN", name()});
}

}  // namespace
}  // namespace tessera::model
