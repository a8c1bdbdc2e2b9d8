#include "tessera/obs/prometheus.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "tests/expect_error.h"

namespace tessera::obs {
namespace {

TEST(Prometheus, RendersTheTextFormat) {
  Registry registry;
  registry.counter("requests_total", "Requests answered.", {{"status", "200"}}).inc(3);
  registry.counter("requests_total", "Requests answered.", {{"status", "400"}}).inc();
  registry.gauge("queue_depth", "Requests waiting.").set(2.5);
  int calls = 0;
  registry.gauge_callback("kv_blocks_free", "Free KV cache blocks.",
                          [&] { return ++calls * 10.0; });
  Histogram& latency =
      registry.histogram("latency_seconds", "Request latency.", {0.1, 0.5, 1}, {{"route", "chat"}});
  latency.observe(0.05);
  latency.observe(0.1);  // bounds are inclusive
  latency.observe(0.7);
  latency.observe(3.0);
  registry.counter("requests_total", "Requests answered.", {{"status", "200"}}).inc();

  EXPECT_EQ(registry.render(),
            "# HELP requests_total Requests answered.\n"
            "# TYPE requests_total counter\n"
            "requests_total{status=\"200\"} 4\n"
            "requests_total{status=\"400\"} 1\n"
            "# HELP queue_depth Requests waiting.\n"
            "# TYPE queue_depth gauge\n"
            "queue_depth 2.5\n"
            "# HELP kv_blocks_free Free KV cache blocks.\n"
            "# TYPE kv_blocks_free gauge\n"
            "kv_blocks_free 10\n"
            "# HELP latency_seconds Request latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{route=\"chat\",le=\"0.1\"} 2\n"
            "latency_seconds_bucket{route=\"chat\",le=\"0.5\"} 2\n"
            "latency_seconds_bucket{route=\"chat\",le=\"1\"} 3\n"
            "latency_seconds_bucket{route=\"chat\",le=\"+Inf\"} 4\n"
            "latency_seconds_sum{route=\"chat\"} 3.85\n"
            "latency_seconds_count{route=\"chat\"} 4\n");
  EXPECT_NE(registry.render().find("kv_blocks_free 20\n"), std::string::npos);  // read each time
  EXPECT_TRUE(Registry().render().empty());
}

TEST(Prometheus, HistogramBucketsAreCumulative) {
  Registry registry;
  Histogram& h = registry.histogram("size_bytes", "Sizes.", {1, 10, 100});
  for (double v : {0.0, 1.0, 2.0, 10.0, 11.0, 50.0, 100.0, 1e9, -5.0}) h.observe(v);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{3, 5, 8, 9}));
  EXPECT_DOUBLE_EQ(h.sum(), 1e9 + 169.0);
  const std::string text = registry.render();
  EXPECT_NE(text.find("size_bytes_bucket{le=\"1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("size_bytes_bucket{le=\"+Inf\"} 9\n"), std::string::npos) << text;
  EXPECT_NE(text.find("size_bytes_count 9\n"), std::string::npos) << text;
  EXPECT_THROW(h.observe(NAN), Error);
}

TEST(Prometheus, ConcurrentUpdatesAllCount) {
  Registry registry;
  Counter& counter = registry.counter("events_total", "Events.");
  Histogram& histogram = registry.histogram("values", "Values.", {0.5});
  Gauge& gauge = registry.gauge("level", "Level.");
  const int threads = 8, per_thread = 20000;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      for (int i = 0; i < per_thread; ++i) {
        counter.inc();
        histogram.observe(t % 2);
        gauge.add(i % 2 ? 1.0 : -1.0);
        if (i % 1000 == 0) registry.counter("lookups_total", "Lookups.", {{"t", "x"}}).inc(0.5);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(counter.value(), double(threads * per_thread));
  EXPECT_EQ(histogram.cumulative_counts(),
            (std::vector<uint64_t>{threads / 2 * per_thread, threads * per_thread}));
  EXPECT_EQ(histogram.sum(), double(threads / 2 * per_thread));
  EXPECT_EQ(gauge.value(), 0.0);
  EXPECT_EQ(registry.counter("lookups_total", "Lookups.", {{"t", "x"}}).value(),
            threads * per_thread / 1000 * 0.5);
}

TEST(Prometheus, EscapesLabelValuesAndHelp) {
  Registry registry;
  registry.counter("odd_total", "A \\ backslash\nand a newline, \"quoted\".",
                   {{"path", "C:\\dir\\\"x\"\nnext"}, {"empty", ""}});
  EXPECT_EQ(registry.render(),
            "# HELP odd_total A \\\\ backslash\\nand a newline, \"quoted\".\n"
            "# TYPE odd_total counter\n"
            "odd_total{path=\"C:\\\\dir\\\\\\\"x\\\"\\nnext\",empty=\"\"} 0\n");
}

// An alias renders the same series again under another name, right after its family, and
// follows their values and the series added after it was made.
TEST(Prometheus, AnAliasRendersTheSameSeriesUnderItsName) {
  Registry registry;
  Gauge& waiting = registry.gauge("tessera_waiting", "Waiting.", {{"model_name", "m"}});
  Histogram& latency = registry.histogram("latency_seconds", "Latency.", {1});
  registry.alias("vllm:num_requests_waiting", "tessera_waiting", "vLLM's name.");
  registry.alias("vllm:e2e_request_latency_seconds", "latency_seconds", "vLLM's name.");
  waiting.set(3);
  latency.observe(0.5);
  registry.gauge("tessera_waiting", "Waiting.", {{"model_name", "n"}}).set(1);
  EXPECT_EQ(registry.render(),
            "# HELP tessera_waiting Waiting.\n"
            "# TYPE tessera_waiting gauge\n"
            "tessera_waiting{model_name=\"m\"} 3\n"
            "tessera_waiting{model_name=\"n\"} 1\n"
            "# HELP vllm:num_requests_waiting vLLM's name.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            "vllm:num_requests_waiting{model_name=\"m\"} 3\n"
            "vllm:num_requests_waiting{model_name=\"n\"} 1\n"
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{le=\"1\"} 1\n"
            "latency_seconds_bucket{le=\"+Inf\"} 1\n"
            "latency_seconds_sum 0.5\n"
            "latency_seconds_count 1\n"
            "# HELP vllm:e2e_request_latency_seconds vLLM's name.\n"
            "# TYPE vllm:e2e_request_latency_seconds histogram\n"
            "vllm:e2e_request_latency_seconds_bucket{le=\"1\"} 1\n"
            "vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\"} 1\n"
            "vllm:e2e_request_latency_seconds_sum 0.5\n"
            "vllm:e2e_request_latency_seconds_count 1\n");
  testing::expect_error([&] { registry.alias("other", "missing_total", "h"); },
                        {"other", "missing_total"});
  testing::expect_error([&] { registry.alias("tessera_waiting", "latency_seconds", "h"); },
                        {"tessera_waiting", "already"});
  testing::expect_error(
      [&] { registry.alias("vllm:num_requests_waiting", "latency_seconds", "h"); },
      {"vllm:num_requests_waiting", "already"});
  testing::expect_error([&] { registry.gauge("vllm:num_requests_waiting", "h"); }, {"alias"});
  testing::expect_error([&] { registry.alias("bad-name", "latency_seconds", "h"); },
                        {"'bad-name'"});
}

TEST(Prometheus, RejectsBadNamesAndConflicts) {
  Registry registry;
  testing::expect_error([&] { registry.counter("2xx_total", "h"); }, {"'2xx_total'", "[a-zA-Z_:]"});
  testing::expect_error([&] { registry.counter("a-b", "h"); }, {"'a-b'"});
  testing::expect_error(
      [&] {
        registry.counter("ok:total", "h", {{"bad:label", "v"}});
      },
      {"'bad:label'"});
  testing::expect_error(
      [&] {
        registry.counter("ok_total", "h", {{"__reserved", "v"}});
      },
      {"'__reserved'"});
  testing::expect_error(
      [&] {
        registry.counter("ok_total", "h", {{"a", "1"}, {"a", "2"}});
      },
      {"'a'", "twice"});
  testing::expect_error([&] { registry.histogram("h", "h", {1}, {{"le", "1"}}); }, {"'le'"});
  testing::expect_error([&] { registry.histogram("h", "h", {2, 1}); }, {"1 follows 2"});
  testing::expect_error([&] { registry.histogram("h", "h", {1, INFINITY}); }, {"finite"});
  // None of the failures above left a metric behind.
  EXPECT_EQ(registry.render(), "");

  registry.counter("c_total", "Counts.", {{"kind", "a"}});
  testing::expect_error([&] { registry.gauge("c_total", "Counts."); }, {"c_total", "counter"});
  testing::expect_error([&] { registry.counter("c_total", "Other."); }, {"c_total", "Counts."});
  testing::expect_error(
      [&] {
        registry.counter("c_total", "Counts.", {{"other", "a"}});
      },
      {"other=\"a\"", "kind=\"a\""});
  registry.histogram("h", "h", {1, 2});
  testing::expect_error([&] { registry.histogram("h", "h", {1, 3}); }, {"other buckets"});
  registry.gauge_callback("g", "g", [] { return 1.0; });
  testing::expect_error([&] { registry.gauge("g", "g"); }, {"callback"});
  testing::expect_error([&] { registry.gauge_callback("g", "g", [] { return 2.0; }); },
                        {"already registered"});
  testing::expect_error(
      [&] {
        registry.counter("c_total", "Counts.", {{"kind", "a"}}).inc(-1);
      },
      {"-1"});
}

}  // namespace
}  // namespace tessera::obs
