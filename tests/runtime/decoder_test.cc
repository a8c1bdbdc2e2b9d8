// Incremental decoding over a paged key/value cache gives the same next-token logits as running
// the whole prefix through next_token_logits, for several sequences interleaved in one call.
#include "tessera/runtime/decoder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/model/lora_merge.h"
#include "tessera/model/transformer.h"
#include "tests/expect_error.h"
#include "tests/model/reference_fixture.h"
#include "tests/model/small_configs.h"

namespace tessera::model {
namespace {

using runtime::DecodeChunk;
using runtime::KvCacheView;

constexpr int64_t kBlockTokens = 4;

// A pool of blocks in which sequence s of S owns blocks s, s + S, s + 2S, ...: interleaved, so
// every sequence's positions are spread over non-adjacent blocks.
class InterleavedBlocks {
 public:
  InterleavedBlocks(const ModelConfig& c, int64_t sequences)
      : tables_(sequences), lengths_(sequences, 0) {
    const int64_t per_seq = (c.max_seq + kBlockTokens - 1) / kBlockTokens;
    const int64_t row = c.kv_heads() * c.head_dim(), blocks = per_seq * sequences;
    storage_.assign(2 * c.n_layer * blocks * kBlockTokens * row, 0.0f);
    for (int64_t l = 0; l < 2 * c.n_layer; ++l) {
      (l % 2 == 0 ? k_ : v_).push_back(storage_.data() + l * blocks * kBlockTokens * row);
    }
    for (int64_t s = 0; s < sequences; ++s) {
      for (int64_t j = 0; j < per_seq; ++j) tables_[s].push_back(int32_t(s + j * sequences));
    }
  }
  KvCacheView view() const { return {k_, v_, kBlockTokens}; }
  // The chunk of sequence s's tokens [length, end), counting them as cached afterwards.
  DecodeChunk next(int64_t s, const std::vector<int32_t>& tokens, int64_t end) {
    const int64_t start = lengths_[s];
    lengths_[s] = end;
    return {tokens.data() + start, end - start, start, tables_[s]};
  }

 private:
  std::vector<float> storage_;
  std::vector<void*> k_, v_;
  std::vector<std::vector<int32_t>> tables_;
  std::vector<int64_t> lengths_;
};

struct Case {
  const char* name;
  ModelConfig config;
  Precision precision;
  double tolerance;
};

std::vector<Case> cases() {
  const auto [gpt2, llama, moe] = small_configs(20);
  // Both paths round the same activations to bf16, so low precision keeps a tight bound too; it
  // is looser only so that a matmul whose rounding depends on its row count would still pass.
  return {{"gpt2", gpt2, Precision::kF32, 1e-4},
          {"llama-gqa", llama, Precision::kF32, 1e-4},
          {"llama-moe", moe, Precision::kF32, 1e-4},
          {"gpt2-bf16", gpt2, Precision::kBf16, 1e-3},
          {"llama-gqa-bf16", llama, Precision::kBf16, 1e-3}};
}

std::vector<int32_t> sequence_tokens(int64_t s, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = int32_t((7 * i + 5 * s + 3) % vocab);
  return t;
}

// Compares row r of decode's logits with the whole-prefix logits of tokens[0, end).
void expect_matches(Transformer& reference, const std::vector<int32_t>& tokens, int64_t end,
                    const float* logits, int64_t r, double tolerance) {
  const int64_t V = reference.config().vocab_size;
  const float* want = reference.next_token_logits(tokens.data(), end);
  double worst = 0;
  for (int64_t v = 0; v < V; ++v)
    worst = std::max(worst, double(std::fabs(logits[r * V + v] - want[v])));
  EXPECT_LT(worst, tolerance) << "row " << r << " after " << end << " tokens";
}

TEST(Decode, InterleavedSequencesMatchTheFullPrefix) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const ModelOptions options{.precision = c.precision};
    Transformer reference(c.config, 1, c.config.max_seq, /*training=*/false, options);
    Transformer model(c.config, 2, c.config.max_seq, /*training=*/false, options);
    reference.init_weights(11);
    model.init_weights(11);
    runtime::Decoder decoder(model);
    const std::vector<int64_t> prompt = {5, 9, 3}, total = {14, 20, 11};
    const int64_t S = int64_t(prompt.size());
    InterleavedBlocks cache(c.config, S);
    std::vector<std::vector<int32_t>> tokens;
    for (int64_t s = 0; s < S; ++s)
      tokens.push_back(sequence_tokens(s, total[s], c.config.vocab_size));

    std::vector<DecodeChunk> chunks;
    for (int64_t s = 0; s < S; ++s) chunks.push_back(cache.next(s, tokens[s], prompt[s]));
    const float* logits = decoder.decode(cache.view(), chunks);
    std::vector<float> rows(logits, logits + S * c.config.vocab_size);
    for (int64_t s = 0; s < S; ++s)
      expect_matches(reference, tokens[s], prompt[s], rows.data(), s, c.tolerance);

    // One token per step for the sequences not yet at their end; sequence 0 sits out odd steps.
    std::vector<int64_t> length = prompt;
    for (int64_t step = 0;; ++step) {
      chunks.clear();
      std::vector<int64_t> ran;
      for (int64_t s = 0; s < S; ++s) {
        if (length[s] == total[s] || (s == 0 && step % 2 == 1)) continue;
        chunks.push_back(cache.next(s, tokens[s], ++length[s]));
        ran.push_back(s);
      }
      if (chunks.empty() && length[0] == total[0]) break;
      if (chunks.empty()) continue;
      logits = decoder.decode(cache.view(), chunks);
      rows.assign(logits, logits + int64_t(ran.size()) * c.config.vocab_size);
      for (int64_t r = 0; r < int64_t(ran.size()); ++r) {
        expect_matches(reference, tokens[ran[r]], length[ran[r]], rows.data(), r, c.tolerance);
      }
    }
  }
}

// A Llama whose RoPE is scaled as Llama 3.1's rope_scaling and as YaRN (trained at 8 positions,
// stretched 4 times), decoded one token at a time from the first: every position's logits, those
// past the trained context included, are PyTorch's from the same weights (tests/reference/
// llama_reference.py, Transformers' formulas for the frequencies).
TEST(Decode, ScaledRopePastTheTrainedContextMatchesPyTorch) {
  for (const char* scaling : {"llama3-rope", "yarn-rope"}) {
    SCOPED_TRACE(scaling);
    const reference::Fixture* f =
        reference::fixture("llama_reference.py", std::string("--config ") + scaling);
    ASSERT_NE(f, nullptr);
    ASSERT_NE(f->config.rope_scaling.type, kernels::RopeScalingType::kNone);
    ASSERT_GT(f->T, f->config.rope_scaling.original_context);
    Transformer model(f->config, 1, f->config.max_seq, /*training=*/false);
    reference::load_parameters(*f, model);
    runtime::Decoder decoder(model);
    const std::vector<int32_t> tokens(f->inputs(), f->inputs() + f->T);
    InterleavedBlocks cache(f->config, 1);
    const int64_t V = f->config.vocab_size;
    const std::vector<float>& want = f->at("logits").f32;
    double worst = 0;
    for (int64_t t = 1; t <= f->T; ++t) {
      const DecodeChunk chunk = cache.next(0, tokens, t);
      const float* logits = decoder.decode(cache.view(), {&chunk, 1});
      for (int64_t v = 0; v < V; ++v) {
        worst = std::max(worst, std::abs(double(logits[v]) - want[size_t((t - 1) * V + v)]));
      }
    }
    std::printf("%s: worst logit difference from PyTorch over %ld positions: %.3g\n", scaling,
                long(f->T), worst);
    EXPECT_LT(worst, 1e-5);
  }
}

// Sequences batched with different served adapters (and none) each decode as the model with its
// adapter merged into its weights does.
TEST(Decode, EachSequenceRunsWithItsOwnAdapter) {
  const ModelConfig base = small_configs(20).llama;
  ModelConfig attention = base, everything = base;
  attention.lora = {.rank = 2, .alpha = 3, .targets = "attention"};
  everything.lora = {.rank = 3, .alpha = 6, .targets = "attention,mlp"};
  Transformer model_of_base(base, 1, base.max_seq, /*training=*/false);
  model_of_base.init_weights(5);
  const std::vector<float> base_params(model_of_base.params().begin(),
                                       model_of_base.params().end());
  AdapterBank bank(base, 3, 4, 3 * base.max_seq);  // slot 2 stays empty
  std::vector<std::unique_ptr<Transformer>> references;
  for (const ModelConfig& adapted : {attention, everything}) {
    const ModelLayout layout = model_layout(adapted);
    std::vector<float> params = base_params;
    params.resize(size_t(layout.params.total()));
    CounterRng rng(int(references.size()) + 1, 0);
    for (int64_t i = layout.adapters_begin; i < layout.params.total(); ++i) {
      params[i] = float(0.3 * rng.normal(uint64_t(i)));
    }
    bank.load(int64_t(references.size()), adapted,
              {params.data() + layout.adapters_begin, params.data() + params.size()});
    const MergedModel merged = merge_lora(adapted, params);
    references.push_back(std::make_unique<Transformer>(base, 1, base.max_seq, false));
    std::copy(merged.params.begin(), merged.params.end(), references.back()->params().begin());
  }
  references.push_back(std::make_unique<Transformer>(base, 1, base.max_seq, false));
  std::copy(base_params.begin(), base_params.end(), references.back()->params().begin());

  Transformer model(base, 3, base.max_seq, /*training=*/false, {.adapters = &bank});
  std::copy(base_params.begin(), base_params.end(), model.params().begin());
  runtime::Decoder decoder(model);
  const int32_t slots[3] = {0, -1, 1};
  const int64_t reference_of[3] = {0, 2, 1};
  InterleavedBlocks cache(base, 3);
  std::vector<std::vector<int32_t>> tokens;
  for (int64_t s = 0; s < 3; ++s) tokens.push_back(sequence_tokens(s, 12, base.vocab_size));
  for (int64_t end : {6, 7, 8, 12}) {
    std::vector<DecodeChunk> chunks;
    for (int64_t s = 0; s < 3; ++s) {
      chunks.push_back(cache.next(s, tokens[s], end));
      chunks.back().adapter = slots[s];
    }
    const float* logits = decoder.decode(cache.view(), chunks);
    const std::vector<float> rows(logits, logits + 3 * base.vocab_size);
    for (int64_t s = 0; s < 3; ++s) {
      expect_matches(*references[reference_of[s]], tokens[s], end, rows.data(), s, 1e-4);
    }
  }
  // The adapters change what the model says: the base alone is elsewhere.
  const float* base_logits = references[2]->next_token_logits(tokens[0].data(), 12);
  const float* adapted_logits = references[0]->next_token_logits(tokens[0].data(), 12);
  EXPECT_GT(
      std::fabs(base_logits[0] - adapted_logits[0]) + std::fabs(base_logits[3] - adapted_logits[3]),
      1e-3);
  InterleavedBlocks fresh(base, 1);
  std::vector<DecodeChunk> empty_slot = {fresh.next(0, tokens[0], 4)};
  for (const int32_t slot : {2, 3}) {  // empty, and past the bank's slots
    empty_slot[0].adapter = slot;
    testing::expect_error([&] { decoder.decode(cache.view(), empty_slot); },
                          {"adapter slot " + std::to_string(slot)});
  }
}

TEST(Decode, APromptInTwoChunksEqualsOneChunk) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const ModelOptions options{.precision = c.precision};
    Transformer model(c.config, 1, c.config.max_seq, /*training=*/false, options);
    model.init_weights(5);
    runtime::Decoder decoder(model);
    const std::vector<int32_t> tokens = sequence_tokens(1, 13, c.config.vocab_size);
    InterleavedBlocks whole(c.config, 1), split(c.config, 1);
    const DecodeChunk one = whole.next(0, tokens, 13);
    const float* logits = decoder.decode(whole.view(), {&one, 1});
    const std::vector<float> want(logits, logits + c.config.vocab_size);
    const DecodeChunk first = split.next(0, tokens, 6);
    decoder.decode(split.view(), {&first, 1});
    const DecodeChunk second = split.next(0, tokens, 13);
    logits = decoder.decode(split.view(), {&second, 1});
    for (int64_t v = 0; v < c.config.vocab_size; ++v) {
      ASSERT_NEAR(logits[v], want[v], c.tolerance) << "vocab entry " << v;
    }
  }
}

TEST(Decode, RejectsChunksWithoutRoomOrPastTheContext) {
  const Case c = cases()[1];
  Transformer model(c.config, 1, c.config.max_seq, /*training=*/false);
  model.init_weights(1);
  runtime::Decoder decoder(model);
  InterleavedBlocks cache(c.config, 1);
  const std::vector<int32_t> tokens = sequence_tokens(0, c.config.max_seq + 1, c.config.vocab_size);
  const std::vector<int32_t> one_block = {0};
  const DecodeChunk no_room{tokens.data(), kBlockTokens + 1, 0, one_block};
  testing::expect_error(
      [&] {
        decoder.decode(cache.view(), {&no_room, 1});
      },
      {"reserve them in the cache"});
  const DecodeChunk too_long = cache.next(0, tokens, c.config.max_seq + 1);
  testing::expect_error([&] { decoder.decode(cache.view(), {&too_long, 1}); }, {"model.max_seq"});
  // check throws the same without running anything, and counts the tokens it would run.
  testing::expect_error([&] { decoder.check(cache.view(), {&too_long, 1}); }, {"model.max_seq"});
  const std::vector<int32_t> out_of_vocabulary = {int32_t(c.config.vocab_size)};
  const DecodeChunk bad_token{out_of_vocabulary.data(), 1, 0, one_block};
  testing::expect_error(
      [&] {
        decoder.check(cache.view(), {&bad_token, 1});
      },
      {"outside the vocabulary"});
  // Logits for none of a chunk's rows, or for more rows than it has.
  for (const int64_t logits : {0, 3}) {
    const DecodeChunk odd{tokens.data(), 2, 0, one_block, logits};
    testing::expect_error(
        [&] {
          decoder.check(cache.view(), {&odd, 1});
        },
        {"asks for the logits of " + std::to_string(logits)});
  }
  const DecodeChunk two{tokens.data(), 2, 0, one_block};
  EXPECT_EQ(decoder.check(cache.view(), {&two, 1}), 2);
  Transformer training(c.config, 1, c.config.max_seq, /*training=*/true);
  const DecodeChunk fine{tokens.data(), 1, 0, one_block};
  testing::expect_error(
      [&] {
        runtime::Decoder(training).decode(cache.view(), {&fine, 1});
      },
      {"training=false"});
}

}  // namespace
}  // namespace tessera::model
