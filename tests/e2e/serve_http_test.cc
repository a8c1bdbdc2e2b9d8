// `tessera serve` over real HTTP: bad requests, greedy agreement with `tessera generate`,
// back-pressure, client disconnects, and the metrics autoscalers read, under load.
#include <httplib.h>

#include <future>

#include "tests/e2e/server_process.h"
#include "tests/metric_value.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

const httplib::Headers kAuth = {{"Authorization", "Bearer secret"}};

class ServeHttp : public ServedCheckpointTest {
 protected:
  static std::string serve_args(const std::string& extra = "") {
    return ServedCheckpointTest::serve_args("--api-key secret " + extra);
  }
};

using testing::metric_value;

std::string metrics(httplib::Client& client) {
  auto r = client.Get("/metrics", kAuth);
  return r ? r->body : "";
}

TEST_F(ServeHttp, BadRequestsGetOpenAiErrorsAndTheServerKeepsServing) {
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  const std::string huge_prompt(2000, 'a');  // longer than the 1024-token context
  const std::vector<std::tuple<std::string, std::string, int>> cases = {
      {"/v1/completions", "{\"model\": \"tiny\", \"prompt\": ", 400},  // truncated JSON
      {"/v1/completions", R"({"model": "tiny", "prompt": "hi", "max_tokens": "ten"})", 400},
      {"/v1/completions", R"({"model": "tiny", "prompt": ["a", "b"]})", 400},
      {"/v1/chat/completions", R"({"model": "tiny"})", 400},
      {"/v1/completions", R"({"model": "tiny", "prompt": ""})", 400},
      {"/v1/completions", R"({"model": "tiny", "prompt": "hi", "max_tokens": -5})", 400},
      {"/v1/completions", R"({"model": "tiny", "prompt": "hi", "max_tokens": 99999999})", 400},
      {"/v1/completions", R"({"model": "tiny", "prompt": "hi", "temperature": -1})", 400},
      {"/v1/completions", R"({"model": "tiny", "prompt": "hi", "top_p": 1.5})", 400},
      {"/v1/completions", R"({"model": "tiny", "prompt": "hi", "top_p": 0})", 400},
      {"/v1/completions", R"({"model": "gpt-4", "prompt": "hi"})", 404},
      {"/v1/completions", R"({"model": "tiny", "prompt": ")" + huge_prompt + R"("})", 400},
      // Bodies over --max-body-bytes are refused as their headers arrive (serve_hostile_test).
  };
  for (const auto& [path, body, status] : cases) {
    auto r = client.Post(path, kAuth, body, "application/json");
    ASSERT_TRUE(r) << body.substr(0, 80);
    EXPECT_EQ(r->status, status) << body.substr(0, 80) << "\n" << r->body;
    const json error = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(error.contains("error")) << r->body;
    EXPECT_TRUE(error["error"]["message"].is_string()) << r->body;
    EXPECT_TRUE(error["error"]["type"].is_string()) << r->body;
    EXPECT_TRUE(error["error"].contains("param") && error["error"].contains("code")) << r->body;
  }
  const std::string valid = R"({"model": "tiny", "prompt": "In the", "max_tokens": 3})";
  for (const httplib::Headers& headers :
       {httplib::Headers{}, httplib::Headers{{"Authorization", "Bearer wrong"}}}) {
    auto r = client.Post("/v1/completions", headers, valid, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << r->body;
    EXPECT_EQ(json::parse(r->body)["error"]["code"], "invalid_api_key");
  }
  EXPECT_EQ(client.Get("/health")->status, 200);  // open without the key
  EXPECT_EQ(client.Get("/v1/models")->status, 401);
  auto ok = client.Post("/v1/completions", kAuth, valid, "application/json");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["usage"]["completion_tokens"], 3);
  EXPECT_GE(metric_value(metrics(client),
                         R"(tessera_http_requests_total{route="/v1/completions",status="400"})"),
            10);
}

TEST_F(ServeHttp, GreedyTextEqualsTesseraGenerate) {
  const CliResult generated = run_cli("generate --checkpoint " + *run_ +
                                      " --prompt 'And it was' --max-tokens 48 --temperature 0");
  ASSERT_EQ(generated.exit_code, 0) << generated.output;
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  auto r = client.Post(
      "/v1/completions", kAuth,
      R"({"model": "tiny", "prompt": "And it was", "max_tokens": 48, "temperature": 0})",
      "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json body = json::parse(r->body);
  EXPECT_EQ("And it was" + body["choices"][0]["text"].get<std::string>() + "\n", generated.output);
  EXPECT_EQ(body["usage"]["completion_tokens"], 48);
}

// --draft: the checkpoint drafting for itself keeps its drafts and gives the text plain decoding
// gives; a draft model without --draft-tokens is refused naming the flag.
TEST_F(ServeHttp, ADraftModelGivesTheSameGreedyText) {
  const std::string body =
      R"({"model": "tiny", "prompt": "And it was", "max_tokens": 40, "temperature": 0})";
  std::string texts[2];
  for (const int draft : {0, 1}) {
    ServerProcess server(serve_args(draft ? "--draft " + *run_ + " --draft-tokens 3" : ""));
    httplib::Client client("127.0.0.1", server.port());
    auto r = client.Post("/v1/completions", kAuth, body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    texts[draft] = json::parse(r->body)["choices"][0]["text"];
    if (draft) {
      const std::string m = metrics(client);
      EXPECT_GT(metric_value(m, "tessera_spec_decode_accepted_tokens_total"), 0) << m;
    }
  }
  EXPECT_EQ(texts[1], texts[0]);
  const CliResult refused = run_cli("serve --checkpoint " + *run_ + " --draft " + *run_);
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("--draft needs --draft-tokens"), std::string::npos)
      << refused.output;
}

TEST_F(ServeHttp, AFullQueueAnswers429WithRetryAfter) {
  ServerProcess server(serve_args("--max-running 1 --max-queue 1"));
  const std::string body =
      R"({"model": "tiny", "prompt": "In the", "max_tokens": 200, "stream": true})";
  std::vector<std::future<std::pair<int, std::string>>> replies;
  for (int i = 0; i < 6; ++i) {
    replies.push_back(std::async(std::launch::async, [&] {
      httplib::Client client("127.0.0.1", server.port());
      auto r = client.Post("/v1/completions", kAuth, body, "application/json");
      if (!r) return std::make_pair(-1, std::string());
      return std::make_pair(r->status, r->get_header_value("Retry-After") + " " + r->body);
    }));
  }
  int ok = 0, refused = 0;
  for (auto& f : replies) {
    const auto [status, text] = f.get();
    if (status == 200) ++ok;
    if (status == 429) {
      ++refused;
      EXPECT_EQ(text.substr(0, 2), "1 ") << text;
      EXPECT_NE(text.find("rate_limit_exceeded"), std::string::npos) << text;
    }
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(refused, 1);
  EXPECT_EQ(ok + refused, 6);
}

// Scraped while 8 requests share 2 places in the batch: vLLM's names carry the same values as
// Tessera's in every scrape, the gauges rise under the load and fall back after it, and the
// counters and histograms count every request and token.
TEST_F(ServeHttp, VllmNamedMetricsMoveUnderLoad) {
  ServerProcess server(serve_args("--max-running 2"));
  httplib::Client scraper("127.0.0.1", server.port());
  const std::string before = metrics(scraper);
  constexpr int kRequests = 8, kTokens = 48;
  std::vector<std::future<int>> replies;
  for (int i = 0; i < kRequests; ++i) {
    replies.push_back(std::async(std::launch::async, [&, i] {
      httplib::Client client("127.0.0.1", server.port());
      client.set_read_timeout(60, 0);
      const json body = {{"model", "tiny"},
                         {"prompt", std::to_string(i) + " In the beginning"},
                         {"max_tokens", kTokens}};
      auto r = client.Post("/v1/completions", kAuth, body.dump(), "application/json");
      return r ? r->status : -1;
    }));
  }
  const std::pair<const char*, const char*> same[] = {
      {"vllm:num_requests_waiting", "tessera_requests_waiting"},
      {"vllm:num_requests_running", "tessera_requests_running"},
      {"vllm:gpu_cache_usage_perc", "tessera_kv_cache_usage_ratio"},
      {"vllm:kv_cache_usage_perc", "tessera_kv_cache_usage_ratio"},
      {"vllm:generation_tokens_total", "tessera_generation_tokens_total"},
      {"vllm:prompt_tokens_total", "tessera_prompt_tokens_total"},
      {"vllm:time_to_first_token_seconds_count", "tessera_time_to_first_token_seconds_count"},
      {"vllm:time_per_output_token_seconds_sum", "tessera_inter_token_latency_seconds_sum"},
      {"vllm:e2e_request_latency_seconds_count", "tessera_request_latency_seconds_count"},
  };
  double most_running = 0, most_waiting = 0, most_usage = 0;
  int scrapes = 0;
  const auto all_done = [&] {
    return std::all_of(replies.begin(), replies.end(), [](const std::future<int>& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
  };
  while (!all_done()) {
    const std::string m = metrics(scraper);
    ++scrapes;
    for (const auto& [vllm, ours] : same) {
      ASSERT_EQ(metric_value(m, vllm), metric_value(m, ours)) << vllm << "\n" << m;
    }
    most_running = std::max(most_running, metric_value(m, "vllm:num_requests_running"));
    most_waiting = std::max(most_waiting, metric_value(m, "vllm:num_requests_waiting"));
    most_usage = std::max(most_usage, metric_value(m, "vllm:gpu_cache_usage_perc"));
  }
  for (auto& f : replies) EXPECT_EQ(f.get(), 200);
  EXPECT_GT(scrapes, 0);
  EXPECT_EQ(most_running, 2);
  EXPECT_GT(most_waiting, 0);
  EXPECT_GT(most_usage, 0);
  EXPECT_LE(most_usage, 1);
  const std::string after = metrics(scraper);
  EXPECT_EQ(metric_value(after, "vllm:num_requests_running"), 0) << after;
  EXPECT_EQ(metric_value(after, "vllm:num_requests_waiting"), 0) << after;
  EXPECT_EQ(metric_value(after, "vllm:gpu_cache_usage_perc"), 0) << after;
  const auto grew = [&](const std::string& series) {
    return metric_value(after, series) - metric_value(before, series);
  };
  // Each request's first token is timed from its arrival, every later one from the token before.
  const double generated = grew("vllm:generation_tokens_total");
  EXPECT_GE(generated, kRequests);
  EXPECT_LE(generated, kRequests * kTokens);
  EXPECT_GE(grew("vllm:prompt_tokens_total"), kRequests * 3);
  EXPECT_EQ(grew("vllm:time_to_first_token_seconds_count"), kRequests);
  EXPECT_EQ(grew("vllm:e2e_request_latency_seconds_count"), kRequests);
  EXPECT_EQ(grew("vllm:request_queue_time_seconds_count"), kRequests);
  EXPECT_EQ(grew("vllm:time_per_output_token_seconds_count"), generated - kRequests);
  EXPECT_EQ(grew("vllm:inter_token_latency_seconds_count"), generated - kRequests);
}

TEST_F(ServeHttp, ADisconnectedStreamReturnsItsKvBlocks) {
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  httplib::Client scraper("127.0.0.1", server.port());
  double used_while_streaming = -1;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = kAuth;
  req.body = R"({"model": "tiny", "prompt": "In the", "max_tokens": 1000, "stream": true})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    used_while_streaming = metric_value(metrics(scraper), "tessera_kv_cache_blocks_used");
    return false;  // hang up after the first chunk
  };
  client.send(req);
  EXPECT_GT(used_while_streaming, 0);
  std::string m;
  for (int i = 0; i < 100; ++i) {
    m = metrics(scraper);
    if (metric_value(m, R"(tessera_requests_finished_total{reason="cancelled"})") == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric_value(m, R"(tessera_requests_finished_total{reason="cancelled"})"), 1) << m;
  EXPECT_EQ(metric_value(m, "tessera_kv_cache_blocks_used"), 0) << m;
  EXPECT_EQ(metric_value(m, "tessera_requests_running"), 0) << m;
}

// 32 concurrent requests sharing a 200-token prefix, against a server with the prefix cache and
// one without: the same greedy text, at least 5x fewer tokens prefilled, and the hit rate in
// /metrics.
TEST_F(ServeHttp, PrefixCacheSavesPrefillWithTheSameGreedyText) {
  std::string prefix;
  for (int i = 0; prefix.size() < 200; ++i) prefix += "And the " + std::to_string(i) + " day ";
  prefix.resize(200);
  auto run = [&](const std::string& flag, std::string& scraped) {
    ServerProcess server(serve_args(flag));
    std::vector<std::future<std::string>> replies;
    for (int i = 0; i < 32; ++i) {
      replies.push_back(std::async(std::launch::async, [&, i] {
        httplib::Client client("127.0.0.1", server.port());
        const json body = {{"model", "tiny"},
                           {"prompt", prefix + "and " + std::to_string(i)},
                           {"max_tokens", 8},
                           {"temperature", 0}};
        auto r = client.Post("/v1/completions", kAuth, body.dump(), "application/json");
        return r && r->status == 200 ? json::parse(r->body)["choices"][0]["text"].get<std::string>()
                                     : std::string("failed");
      }));
    }
    std::vector<std::string> texts;
    for (auto& f : replies) texts.push_back(f.get());
    httplib::Client scraper("127.0.0.1", server.port());
    scraped = metrics(scraper);
    return texts;
  };
  std::string with_metrics, without_metrics;
  const std::vector<std::string> with = run("--prefix-cache on", with_metrics);
  const std::vector<std::string> without = run("--prefix-cache off", without_metrics);
  EXPECT_EQ(with, without);
  EXPECT_EQ(std::count(with.begin(), with.end(), "failed"), 0);
  const double prefill_with = metric_value(with_metrics, "tessera_prefill_tokens_total");
  const double prefill_without = metric_value(without_metrics, "tessera_prefill_tokens_total");
  EXPECT_GE(prefill_without, 5 * prefill_with) << prefill_without << " vs " << prefill_with;
  std::printf("prefill tokens: %.0f without the prefix cache, %.0f with it (%.1fx fewer)\n",
              prefill_without, prefill_with, prefill_without / prefill_with);
  EXPECT_GT(metric_value(with_metrics, "tessera_prefix_cache_hit_rate"), 0.8) << with_metrics;
  EXPECT_EQ(metric_value(without_metrics, "tessera_prefix_cache_hit_rate"), 0);
}

// A whole (non-streamed) reply goes out as soon as its last token is decoded: 50 in a row, each
// within a small multiple of the slowest streamed reply of the same request, which shows the
// decode time. The connection's poll is a second long, so one missed wake-up fails this.
TEST_F(ServeHttp, WholeRepliesLeaveAsSoonAsTheyAreDecoded) {
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  using Clock = std::chrono::steady_clock;
  auto seconds_for = [&](bool stream) {
    const json body = {{"model", "tiny"},
                       {"prompt", "And it was"},
                       {"max_tokens", 3},
                       {"temperature", 0},
                       {"stream", stream}};
    const auto start = Clock::now();
    auto r = client.Post("/v1/completions", kAuth, body.dump(), "application/json");
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_TRUE(r && r->status == 200);
    return seconds;
  };
  double slowest_streamed = 0;
  for (int i = 0; i < 10; ++i) slowest_streamed = std::max(slowest_streamed, seconds_for(true));
  const double bound = 3 * slowest_streamed + 0.1;
  std::vector<double> late;
  for (int i = 0; i < 50; ++i) {
    const double seconds = seconds_for(false);
    if (seconds > bound) late.push_back(seconds);
  }
  EXPECT_TRUE(late.empty()) << late.size() << " of 50 whole replies took longer than " << bound
                            << " s (the slowest streamed reply took " << slowest_streamed
                            << " s); the first: " << late.front() << " s";
}

TEST_F(ServeHttp, ReadyAndModelsDescribeTheServer) {
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  auto ready = client.Get("/ready", kAuth);
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  auto models = client.Get("/v1/models", kAuth);
  ASSERT_TRUE(models);
  const json list = json::parse(models->body);
  EXPECT_EQ(list["data"][0]["id"], "tiny");
  EXPECT_EQ(list["data"][0]["max_model_len"], 1024);
  EXPECT_NE(server.output().find("KV cache:"), std::string::npos) << server.output();
}

}  // namespace
}  // namespace tessera::testing
