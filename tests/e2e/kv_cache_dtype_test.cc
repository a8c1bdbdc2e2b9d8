// The KV cache in q8_0 (--kv-cache-dtype q8_0), end to end on a trained Llama: the same
// --kv-cache-bytes holds 3.8 times the tokens, the perplexity of text the model never saw,
// computed through the paged cache as the server runs a prompt, moves by less than 0.5%, and
// generate and serve take the flag (and refuse a dtype they do not hold by name).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/runtime/decoder.h"
#include "tessera/serve/engine.h"
#include "tessera/serve/kv_cache.h"
#include "tessera/serve/served_model.h"
#include "tests/e2e/cli_runner.h"
#include "tests/e2e/llama_cpp_reference.h"
#include "tests/e2e/run_checkpoint.h"

namespace tessera::testing {
namespace {

constexpr int64_t kMaxSeq = 256;

class KvCacheDtype : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    write_file(dir().path() / "corpus.txt", small_corpus());
    // Heads of 32 values: one q8_0 block each.
    const CliResult t = run_cli(
        "train --data " + (dir() / "corpus.txt") + " --out " + run() +
        " --set model.arch=llama --set model.n_layer=2 --set model.n_head=2 --set model.d_model=64"
        " --set model.max_seq=256 --set train.batch_size=8 --set train.seq_len=128"
        " --set train.steps=60 --set train.eval_every=0");
    ASSERT_EQ(t.exit_code, 0) << t.output;
  }
  static TempDir& dir() {
    static TempDir d{"tessera-kv-cache-dtype"};
    return d;
  }
  static std::string run() { return dir() / "run"; }
};

// The mean negative log-likelihood of each next token of `tokens`, run as one prompt through a
// paged cache of `dtype`.
double mean_nll(const Checkpoint& c, const std::vector<int32_t>& tokens, kernels::KvDtype dtype) {
  model::Transformer m(c.config, 1, kMaxSeq, /*training=*/false);
  std::copy(c.params.begin(), c.params.end(), m.params().begin());
  serve::PagedKvCache cache(kernels::kCpuContext, m.model_layout(), kMaxSeq,
                            serve::PagedKvCache::kDefaultBlockTokens, /*prefix_caching=*/false,
                            dtype);
  const int64_t seq = cache.add_sequence(), T = int64_t(tokens.size());
  EXPECT_TRUE(cache.reserve(seq, T));
  runtime::DecodeChunk chunk = cache.chunk(seq, tokens);
  chunk.logits = T;
  runtime::Decoder decoder(m);
  const float* logits = decoder.decode(cache.view(), {&chunk, 1});
  const int64_t V = c.config.vocab_size;
  double nll = 0;
  for (int64_t t = 0; t + 1 < T; ++t) {
    nll -= log_softmax(logits + t * V, V)[size_t(tokens[t + 1])];
  }
  return nll / double(T - 1);
}

TEST_F(KvCacheDtype, Q8_0MovesHeldOutPerplexityByLessThanHalfAPercent) {
  const Checkpoint c = load_checkpoint(run());
  const std::string unseen =
      "Tessera trains and serves transformer language models from one laptop CPU to thousands "
      "of accelerators, in one native codebase with no Python at run time. Its planner maps a "
      "model and a cluster to a layout, memory, time and cost, and its server answers requests.";
  const std::vector<int32_t> tokens(unseen.begin(), unseen.begin() + kMaxSeq - 16);
  const double f32 = std::exp(mean_nll(c, tokens, kernels::KvDtype::kF32));
  const double q8 = std::exp(mean_nll(c, tokens, kernels::KvDtype::kQ8_0));
  std::printf("held-out perplexity over %zu tokens: f32 cache %.4f, q8_0 cache %.4f (%+.3f%%)\n",
              tokens.size() - 1, f32, q8, 100 * (q8 / f32 - 1));
  EXPECT_NE(q8, f32) << "the q8_0 cache read as f32";
  EXPECT_LT(std::fabs(q8 / f32 - 1), 0.005);
}

TEST_F(KvCacheDtype, TheSameBytesHoldNearlyFourTimesTheTokens) {
  const serve::EngineOptions options{.kv_cache_bytes = 4 << 20};
  int64_t tokens[2] = {};
  for (const kernels::KvDtype dtype : {kernels::KvDtype::kF32, kernels::KvDtype::kQ8_0}) {
    const serve::ServedModel served =
        serve::load_served_model(run(), 64, serve::ServingFormat{.kv_dtype = dtype});
    tokens[int(dtype)] = serve::kv_pool_tokens(options, served);
  }
  std::printf("4 MiB hold %lld tokens in f32, %lld in q8_0\n", static_cast<long long>(tokens[0]),
              static_cast<long long>(tokens[1]));
  // 34 bytes for every 32 values against 128.
  EXPECT_GE(double(tokens[1]) / double(tokens[0]), 3.7);
}

TEST_F(KvCacheDtype, GenerateTakesTheFlagAndRefusesAnotherDtypeByName) {
  const std::string sample = " --prompt 'In the beginning' --max-tokens 12 --temperature 0";
  const CliResult q8 =
      run_cli("generate --checkpoint " + run() + sample + " --kv-cache-dtype q8_0");
  ASSERT_EQ(q8.exit_code, 0) << q8.output;
  EXPECT_NE(q8.output.find("In the beginning"), std::string::npos) << q8.output;
  const CliResult bad = run_cli("generate --checkpoint " + run() + sample + " --kv-cache-dtype q4");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--kv-cache-dtype must be \"f32\" or \"q8_0\", got \"q4\""),
            std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace tessera::testing
