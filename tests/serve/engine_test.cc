#include "tessera/serve/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "tessera/model/serving_memory.h"
#include "tests/expect_error.h"
#include "tests/metric_value.h"

namespace tessera::serve {
namespace {

using namespace std::chrono_literals;

// A byte-level Llama small enough that a few hundred decode steps take milliseconds.
model::ModelConfig small_config(int64_t max_seq) {
  model::ModelConfig c;
  c.arch = model::Architecture::kLlama;
  c.vocab_size = 256;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.d_model = 32;
  c.max_seq = max_seq;
  return c;
}

ServedModel served_model(const model::ModelConfig& c, int64_t max_step_tokens, uint64_t seed,
                         const model::ModelOptions& options = {}) {
  ServedModel served;
  served.model = std::make_unique<model::Transformer>(
      c, model::inference_max_batch(c, max_step_tokens), c.max_seq, false, options);
  served.model->init_weights(seed);
  served.tokenizer = tokenizer::load_tokenizer("byte");
  return served;
}

ServedModel small_model(int64_t max_step_tokens, int64_t max_seq = 96,
                        const model::ModelOptions& options = {}) {
  return served_model(small_config(max_seq), max_step_tokens, 7, options);
}

struct Result {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason;
};

Result collect(RequestStream& out) {
  Result r;
  std::vector<GeneratedToken> fresh;
  for (bool finished = false; !finished;) {
    finished = out.wait(fresh, 10s);
    for (const GeneratedToken& t : fresh) {
      r.tokens.push_back(t.id);
      r.text += t.text;
    }
  }
  r.reason = out.finish_reason();
  return r;
}

GenerationRequest request(const std::string& prompt, int64_t max_tokens, double temperature = 0,
                          uint64_t seed = 0) {
  GenerationRequest g;
  g.prompt.assign(prompt.begin(), prompt.end());
  g.max_tokens = max_tokens;
  g.sampling.temperature = temperature;
  g.sampling.seed = seed;
  return g;
}

// Greedy continuation by rerunning the whole prefix for every token, without any cache.
std::vector<int32_t> greedy_reference(model::Transformer& m, const std::string& prompt, int n) {
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const float* logits = m.next_token_logits(tokens.data(), int64_t(tokens.size()));
    const int32_t next = int32_t(std::max_element(logits, logits + 256) - logits);
    tokens.push_back(next);
    out.push_back(next);
  }
  return out;
}

using testing::metric_value;

TEST(Engine, BatchedGreedyEqualsRecomputingEachSequenceAlone) {
  ServedModel served = small_model(64);
  ServeMetrics metrics;
  std::vector<std::string> prompts = {"In the beginning", "And God said", "x",
                                      std::string(70, 'a')};  // longer than a step's chunk
  std::vector<std::shared_ptr<RequestStream>> outs;
  {
    Engine engine(served, {.max_running = 8, .max_step_tokens = 64}, metrics);
    for (const auto& p : prompts) outs.push_back(engine.submit(request(p, 20)));
    std::vector<Result> results;
    for (auto& out : outs) results.push_back(collect(*out));
    model::Transformer reference(served.config(), 1, 96, false);
    reference.init_weights(7);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(results[i].tokens, greedy_reference(reference, prompts[i], 20)) << prompts[i];
      EXPECT_EQ(results[i].reason, FinishReason::kLength);
      EXPECT_EQ(outs[i]->completion_tokens(), 20);
    }
  }
  const std::string m = metrics.render();
  EXPECT_EQ(metric_value(m, "tessera_generation_tokens_total"), 80);
  EXPECT_EQ(metric_value(m, "tessera_time_to_first_token_seconds_count"), 4);
  EXPECT_EQ(metric_value(m, "tessera_kv_cache_blocks_used"), 0);
}

// A draft model for small_model(64, 160): the same weights (whose greedy drafts the target
// keeps whenever it samples greedily), or a smaller model of its own.
ServedModel draft_model(bool same_weights) {
  if (same_weights) return small_model(64, 160);
  model::ModelConfig c = small_config(160);
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.d_model = 16;
  ServedModel served = served_model(c, 64, 3);
  // Scaled up so that its drafts part from the target's (freshly initialised models of either
  // size mostly repeat the last token).
  for (float& w : served.model->params()) w *= 2.5f;
  return served;
}

// Speculative decoding, by prompt lookup and by a draft model (the target's own weights, or a
// smaller model), gives every request the tokens it gets without, greedy and sampled, for 32
// prompts batched together (half of them repeating themselves, so drafts are taken), and counts
// what it drafted and kept.
TEST(Engine, SpeculationGivesTheSameTokensGreedyAndSampled) {
  ServedModel served = small_model(64, 160);
  for (const char* drafter :
       {"prompt lookup", "draft model, same weights", "smaller draft model"}) {
    SCOPED_TRACE(drafter);
    std::optional<ServedModel> draft;
    if (drafter[0] != 'p') draft = draft_model(drafter[13] == 's');
    std::vector<std::string> prompts;
    for (int i = 0; i < 32; ++i) {
      prompts.push_back(i % 2 == 0 ? "the cat sat on the mat " + std::to_string(i) +
                                         ". the cat sat on the mat. the cat sat"
                                   : "And God said " + std::string(size_t(i), 'x'));
    }
    for (const double temperature : {0.0, 0.8}) {
      SCOPED_TRACE(temperature == 0 ? "greedy" : "sampled");
      std::vector<Result> plain, speculated;
      ServeMetrics plain_metrics, metrics;
      for (const int64_t draft_tokens : {0, 4}) {
        Engine engine(served,
                      {.max_running = 8, .max_step_tokens = 64, .draft_tokens = draft_tokens},
                      draft_tokens == 0 ? plain_metrics : metrics,
                      draft && draft_tokens > 0 ? &*draft : nullptr);
        std::vector<std::shared_ptr<RequestStream>> outs;
        for (size_t i = 0; i < prompts.size(); ++i) {
          outs.push_back(engine.submit(request(prompts[i], 40, temperature, 11 + i)));
        }
        int64_t kept = 0, rejected = 0;
        for (auto& out : outs) {
          (draft_tokens == 0 ? plain : speculated).push_back(collect(*out));
          kept += out->usage().accepted_prediction;
          rejected += out->usage().rejected_prediction;
        }
        // Each request's usage counts its own drafts; together they are the server's.
        const std::string m = (draft_tokens == 0 ? plain_metrics : metrics).render();
        EXPECT_EQ(kept, metric_value(m, "tessera_spec_decode_accepted_tokens_total"));
        EXPECT_EQ(kept + rejected, metric_value(m, "tessera_spec_decode_draft_tokens_total"));
      }
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(speculated[i].tokens, plain[i].tokens) << prompts[i];
        EXPECT_EQ(speculated[i].reason, plain[i].reason) << prompts[i];
      }
      const std::string m = metrics.render();
      const double drafted = metric_value(m, "vllm:spec_decode_num_draft_tokens_total");
      const double accepted = metric_value(m, "vllm:spec_decode_num_accepted_tokens_total");
      EXPECT_GT(metric_value(m, "tessera_spec_decode_drafts_total"), 0) << m;
      // The smaller model's drafts are all refused, and each refusal cut back its cache.
      if (std::string(drafter) != "smaller draft model") EXPECT_GT(accepted, 0) << m;
      EXPECT_LE(accepted, drafted) << m;
      std::printf("%s: %.0f of %.0f drafted tokens kept (%.0f%%), %.2f tokens per verifying step\n",
                  temperature == 0 ? "greedy" : "sampled", accepted, drafted,
                  100 * accepted / drafted,
                  (accepted + metric_value(m, "tessera_spec_decode_drafts_total")) /
                      metric_value(m, "tessera_spec_decode_drafts_total"));
      // Every token is generated once, whether a draft proposed it or not.
      EXPECT_EQ(metric_value(m, "tessera_generation_tokens_total"), 32 * 40);
      EXPECT_EQ(metric_value(m, "tessera_kv_cache_blocks_used"), 0) << m;
      // The target's own greedy drafts are what it samples greedily: nearly all are kept (those
      // cut by max_tokens are not).
      if (temperature == 0 && std::string(drafter) == "draft model, same weights") {
        EXPECT_GT(accepted / drafted, 0.9) << m;
      }
    }
  }
}

// Sampled speculation follows the target's distribution: 2,000 seeded three-token requests with
// the target's own weights drafting. The first token comes from the prompt's step; after the
// most likely one, the draft is the most likely second token, kept only when the second
// position samples it. The second token's counts, and the third's after the kept draft, are each
// checked against softmax(logits / T) by a chi-squared test over the tokens expected at least 5
// times (the rest pooled), failing above dof + 4 sqrt(2 dof): about 1 in 30,000 for a correct
// sampler.
TEST(Engine, SampledSpeculationFollowsTheTargetDistribution) {
  ServedModel served = small_model(64, 160);
  ServedModel draft = draft_model(/*same_weights=*/true);
  // Weights scaled up so that the distributions depend on the context more than a freshly
  // initialised model's, which mostly repeats the last token.
  for (ServedModel* m : {&served, &draft}) {
    for (float& w : m->model->params()) w *= 6;
  }
  const double temperature = 1.0;
  const std::string prompt = "the cat sat on the mat";
  constexpr int kSamples = 2000;
  std::vector<std::vector<int32_t>> samples;
  {
    ServeMetrics metrics;
    Engine engine(
        served,
        {.max_running = 16, .max_step_tokens = 64, .max_queue = kSamples, .draft_tokens = 2},
        metrics, &draft);
    std::vector<std::shared_ptr<RequestStream>> outs;
    for (int i = 0; i < kSamples; ++i) {
      outs.push_back(engine.submit(request(prompt, 3, temperature, uint64_t(1000 + i))));
    }
    for (auto& out : outs) samples.push_back(collect(*out).tokens);
    EXPECT_GT(metric_value(metrics.render(), "tessera_spec_decode_accepted_tokens_total"), 100);
  }
  std::vector<int32_t> context(prompt.begin(), prompt.end());
  const auto next = [&] {
    const float* logits = served.model->next_token_logits(context.data(), int64_t(context.size()));
    std::vector<double> p(256);
    const float top = *std::max_element(logits, logits + 256);
    double sum = 0;
    for (int t = 0; t < 256; ++t) sum += p[t] = std::exp((logits[t] - top) / temperature);
    for (double& x : p) x /= sum;
    return p;
  };
  const auto chi_squared_holds = [](const std::vector<int64_t>& counts,
                                    const std::vector<double>& p, int64_t n) {
    double statistic = 0, pooled_count = 0, pooled_p = 0;
    int64_t bins = 0;
    for (size_t t = 0; t < p.size(); ++t) {
      const double e = p[t] * double(n);
      if (e < 5) {
        pooled_count += double(counts[t]);
        pooled_p += p[t];
        continue;
      }
      statistic += (double(counts[t]) - e) * (double(counts[t]) - e) / e;
      ++bins;
    }
    if (pooled_p * double(n) >= 5) {
      const double e = pooled_p * double(n);
      statistic += (pooled_count - e) * (pooled_count - e) / e;
      ++bins;
    }
    const double dof = double(bins - 1), limit = dof + 4 * std::sqrt(2 * dof);
    std::printf("chi-squared %.1f over %lld bins (limit %.1f) from %lld samples\n", statistic,
                (long long)bins, limit, (long long)n);
    return bins >= 2 && statistic < limit;
  };
  const auto most_likely = [](const std::vector<double>& p) {
    return int32_t(std::max_element(p.begin(), p.end()) - p.begin());
  };
  // After the most likely first token: the speculated second position, then the third after
  // the draft was kept.
  context.push_back(most_likely(next()));
  for (int position = 1; position <= 2; ++position) {
    const std::vector<double> p = next();
    std::vector<int64_t> counts(256);
    int64_t n = 0;
    for (const std::vector<int32_t>& s : samples) {
      ASSERT_EQ(s.size(), 3u);
      if (std::equal(s.begin(), s.begin() + position, context.end() - position)) {
        ++counts[size_t(s[size_t(position)])];
        ++n;
      }
    }
    ASSERT_GT(n, 100) << "position " << position;
    EXPECT_TRUE(chi_squared_holds(counts, p, n)) << "position " << position;
    context.push_back(most_likely(p));
  }
}

TEST(Engine, ServesBf16Int8AndQ4Weights) {
  for (const model::ModelOptions options :
       {model::ModelOptions{.precision = model::Precision::kBf16},
        model::ModelOptions{.weights = model::WeightFormat::kInt8},
        model::ModelOptions{.weights = model::WeightFormat::kQ4_0}}) {
    ServedModel served = small_model(64, 96, options);
    ServeMetrics metrics;
    Engine engine(served, {.max_running = 8, .max_step_tokens = 64}, metrics);
    const std::vector<std::string> prompts = {"In the beginning", "And God said", "x"};
    std::vector<std::shared_ptr<RequestStream>> outs;
    for (const auto& p : prompts) outs.push_back(engine.submit(request(p, 24)));
    model::Transformer reference(served.config(), 1, 96, false, options);
    reference.init_weights(7);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const Result r = collect(*outs[i]);
      ASSERT_EQ(r.tokens.size(), 24u);
      std::vector<int32_t> prefix(prompts[i].begin(), prompts[i].end());
      for (int32_t token : r.tokens) {
        const float* logits = reference.next_token_logits(prefix.data(), int64_t(prefix.size()));
        const float best = *std::max_element(logits, logits + 256);
        EXPECT_GE(logits[token], best - 0.02f) << prompts[i] << " at " << prefix.size();
        prefix.push_back(token);
      }
    }
  }
}

TEST(Engine, SameSeedGivesTheSameTextWhateverRunsBeside) {
  ServedModel served = small_model(128);
  ServeMetrics metrics;
  Engine engine(served, {.max_running = 16, .max_step_tokens = 128}, metrics);
  const Result alone = collect(*engine.submit(request("The seed", 40, 1.0, 1234)));
  std::vector<std::shared_ptr<RequestStream>> others;
  for (int i = 0; i < 8; ++i) {
    others.push_back(engine.submit(request(std::string(5 + 7 * i, 'q'), 30 + i, 0.9, i)));
  }
  const Result crowded = collect(*engine.submit(request("The seed", 40, 1.0, 1234)));
  for (auto& o : others) collect(*o);
  EXPECT_EQ(alone.tokens, crowded.tokens);
  EXPECT_EQ(alone.text, crowded.text);
  const Result other_seed = collect(*engine.submit(request("The seed", 40, 1.0, 99)));
  EXPECT_NE(alone.tokens, other_seed.tokens);
}

// With and without the prefix cache: the prompts share their first block, so with it cached
// blocks are shared, evicted for room and recomputed, and no output changes.
// Also with speculation, whose rejected drafts' keys and values must never reach a shared block.
TEST(Engine, PreemptsWhenTheCacheRunsDryAndStillGivesTheSameTokens) {
  for (const auto& [caching, draft_tokens] :
       {std::pair{false, 0}, std::pair{true, 0}, std::pair{false, 4}, std::pair{true, 4}}) {
    SCOPED_TRACE(fmt::format("prefix caching {}, {} draft tokens", caching, draft_tokens));
    ServedModel served = small_model(64);
    ServeMetrics metrics;
    // Four sequences growing to 81 tokens need 24 blocks of 16; the pool has 10.
    Engine engine(served,
                  {.kv_cache_tokens = 160,
                   .max_running = 4,
                   .max_step_tokens = 64,
                   .prefix_caching = caching,
                   .draft_tokens = draft_tokens},
                  metrics);
    auto prompt = [](int i) { return "a shared start " + std::to_string(i); };
    std::vector<std::shared_ptr<RequestStream>> outs;
    for (int i = 0; i < 4; ++i) outs.push_back(engine.submit(request(prompt(i), 64)));
    model::Transformer reference(served.config(), 1, 96, false);
    reference.init_weights(7);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(collect(*outs[i]).tokens, greedy_reference(reference, prompt(i), 64));
    }
    const std::string m = metrics.render();
    EXPECT_GT(metric_value(m, "tessera_preemptions_total"), 0) << m;
    EXPECT_EQ(metric_value(m, "tessera_kv_cache_blocks_used"), 0) << m;
  }
}

TEST(Engine, StopStringsAndMaxTokensEndRequests) {
  ServedModel served = small_model(64);
  ServeMetrics metrics;
  Engine engine(served, {.max_running = 4, .max_step_tokens = 64}, metrics);
  const Result free_run = collect(*engine.submit(request("abc", 30)));
  ASSERT_GE(free_run.text.size(), 6u);
  GenerationRequest stopped = request("abc", 30);
  stopped.stop = {free_run.text.substr(3, 2)};
  const Result r = collect(*engine.submit(stopped));
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_EQ(r.text, free_run.text.substr(0, free_run.text.find(stopped.stop[0])));
  EXPECT_EQ(collect(*engine.submit(request("abc", 5))).tokens.size(), 5u);
  // The context (96) ends a request before max_tokens does.
  const Result full = collect(*engine.submit(request(std::string(90, 'z'), 30)));
  EXPECT_EQ(full.tokens.size(), 6u);
  EXPECT_EQ(full.reason, FinishReason::kLength);
}

TEST(Engine, CancellingFreesTheSequenceAndItsBlocks) {
  // Long enough that it is still running when the cancel arrives.
  ServedModel served = small_model(64, 1024);
  ServeMetrics metrics;
  Engine engine(served, {.max_running = 4, .max_step_tokens = 64}, metrics);
  auto out = engine.submit(request(std::string(40, 'c'), 900));
  std::vector<GeneratedToken> first;
  while (first.empty()) ASSERT_FALSE(out->wait(first, 10s));
  out->cancel();
  std::vector<GeneratedToken> rest;
  while (!out->wait(rest, 10s)) {
  }
  EXPECT_EQ(out->finish_reason(), FinishReason::kCancelled);
  EXPECT_LT(out->completion_tokens(), 900);
  const std::string m = metrics.render();
  EXPECT_EQ(metric_value(m, "tessera_kv_cache_blocks_used"), 0) << m;
  EXPECT_EQ(metric_value(m, R"(tessera_requests_finished_total{reason="cancelled"})"), 1) << m;
}

TEST(Engine, RefusesWhenTheQueueIsFull) {
  ServedModel served = small_model(64);
  ServeMetrics metrics;
  Engine engine(served, {.max_running = 1, .max_step_tokens = 64, .max_queue = 2}, metrics);
  std::vector<std::shared_ptr<RequestStream>> outs;
  bool refused = false;
  for (int i = 0; i < 8 && !refused; ++i) {
    try {
      outs.push_back(engine.submit(request("long", 90)));
    } catch (const QueueFull& e) {
      refused = true;
      EXPECT_NE(std::string(e.what()).find("--max-queue 2"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(refused);
  for (auto& out : outs) out->cancel();
}

TEST(Engine, RejectsRequestsThatCanNeverRun) {
  ServedModel served = small_model(64);
  ServeMetrics metrics;
  Engine engine(served, {.kv_cache_tokens = 32, .max_running = 4, .max_step_tokens = 64}, metrics);
  testing::expect_error([&] { engine.submit(request("", 4)); }, {"prompt is empty"});
  testing::expect_error([&] { engine.submit(request(std::string(96, 'x'), 4)); },
                        {"96 tokens", "context is 96"});
  testing::expect_error([&] { engine.submit(request("abc", 60)); },
                        {"63 tokens", "KV cache holds 32", "--kv-cache-tokens"});
}

// 32 requests arriving together, sharing a 200-token prefix: with the prefix cache they prefill
// at least 5x fewer tokens, and every greedy continuation is the same as without it.
TEST(Engine, PrefixCacheSavesPrefillAndKeepsGreedyOutputs) {
  ServedModel served = small_model(256, 320);
  const std::string prefix = [] {
    std::string p;
    for (int i = 0; p.size() < 200; ++i) p += "verse " + std::to_string(i) + " ";
    return p.substr(0, 200);
  }();
  auto run = [&](bool caching, ServeMetrics& metrics) {
    Engine engine(served, {.max_running = 32, .max_step_tokens = 256, .prefix_caching = caching},
                  metrics);
    std::vector<std::shared_ptr<RequestStream>> outs;
    for (int i = 0; i < 32; ++i) {
      outs.push_back(engine.submit(request(prefix + "question " + std::to_string(i), 12)));
    }
    std::vector<std::vector<int32_t>> tokens;
    for (auto& out : outs) tokens.push_back(collect(*out).tokens);
    return tokens;
  };
  ServeMetrics without_metrics, with_metrics;
  const auto without = run(false, without_metrics);
  const auto with = run(true, with_metrics);
  EXPECT_EQ(with, without);
  const std::string m_without = without_metrics.render(), m_with = with_metrics.render();
  const double prefill_without = metric_value(m_without, "tessera_prefill_tokens_total");
  const double prefill_with = metric_value(m_with, "tessera_prefill_tokens_total");
  EXPECT_EQ(prefill_without, metric_value(m_without, "tessera_prompt_tokens_total"));
  EXPECT_GE(prefill_without, 5 * prefill_with) << prefill_without << " vs " << prefill_with;
  std::printf("prefill tokens: %.0f without the prefix cache, %.0f with it (%.1fx fewer)\n",
              prefill_without, prefill_with, prefill_without / prefill_with);
  const double hits = metric_value(m_with, "tessera_prefix_cache_hits_total");
  EXPECT_EQ(hits + prefill_with, prefill_without);
  EXPECT_NEAR(metric_value(m_with, "tessera_prefix_cache_hit_rate"),
              hits / metric_value(m_with, "tessera_prefix_cache_queries_total"), 1e-9);
  EXPECT_GT(metric_value(m_with, "tessera_prefix_cache_hit_rate"), 0.8);
  EXPECT_EQ(metric_value(m_without, "tessera_prefix_cache_hits_total"), 0);
  EXPECT_EQ(metric_value(m_with, "tessera_kv_cache_blocks_used"), 0) << m_with;
  EXPECT_GT(metric_value(m_with, "tessera_kv_cache_blocks_cached"), 0) << m_with;
}

TEST(Engine, StopEndsUnfinishedRequestsAndRefusesNewOnes) {
  ServedModel served = small_model(64, 1024);
  ServeMetrics metrics;
  Engine engine(served, {.max_running = 1, .max_step_tokens = 64}, metrics);
  auto running = engine.submit(request("long", 1000));
  auto waiting = engine.submit(request("queued", 1000));
  EXPECT_EQ(engine.unfinished(), 2);
  engine.stop("going away");
  for (auto* out : {running.get(), waiting.get()}) {
    collect(*out);
    EXPECT_EQ(out->finish_reason(), FinishReason::kShutdown);
    EXPECT_EQ(out->error(), "going away");
  }
  EXPECT_EQ(engine.unfinished(), 0);
  testing::expect_error([&] { engine.submit(request("late", 4)); }, {"going away"});
  const std::string m = metrics.render();
  EXPECT_EQ(metric_value(m, R"(tessera_requests_finished_total{reason="shutdown"})"), 2) << m;
}

TEST(Engine, AListenerHearsEveryTokenAndTheEnd) {
  ServedModel served = small_model(64, 1024);
  ServeMetrics metrics;
  // One sequence at a time: the second request waits behind the first while its listener is set.
  Engine engine(served, {.max_running = 1, .max_step_tokens = 64}, metrics);
  auto first = engine.submit(request("ahead", 400));
  auto out = engine.submit(request("listen", 10));
  std::atomic<int> calls = 0;
  out->set_listener([&] { ++calls; });
  collect(*first);
  EXPECT_EQ(collect(*out).tokens.size(), 10u);
  // The engine calls the listener after it has marked the end, so a reader may see the end just
  // before the last call.
  for (const auto until = std::chrono::steady_clock::now() + 10s;
       calls.load() < 11 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(calls.load(), 11);  // each token, then the end
  out->set_listener({});
}

}  // namespace
}  // namespace tessera::serve
