#include "tessera/serve/serve_metrics.h"

namespace tessera::serve {

namespace {

// From 1 ms to 1 minute, roughly doubling: first-token and request latencies span all of it.
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,    30,   60};
// Inter-token latency sits between 100 us and a second.
const std::vector<double> kTokenBuckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                           0.025,  0.05,    0.1,    0.25,  0.5,    1};

}  // namespace

ServeMetrics::ServeMetrics()
    : waiting_(
          registry_.gauge("tessera_requests_waiting", "Requests queued for a place in the batch")),
      running_(registry_.gauge("tessera_requests_running", "Sequences in the running batch")),
      kv_used_(
          registry_.gauge("tessera_kv_cache_blocks_used", "KV cache blocks held by sequences")),
      kv_free_(registry_.gauge("tessera_kv_cache_blocks_free", "KV cache blocks free")),
      ttft_(registry_.histogram("tessera_time_to_first_token_seconds",
                                "From a request's arrival to its first generated token",
                                kLatencyBuckets)),
      itl_(registry_.histogram("tessera_inter_token_latency_seconds",
                               "Between consecutive generated tokens of a request", kTokenBuckets)),
      latency_(registry_.histogram("tessera_request_latency_seconds",
                                   "From a request's arrival to its last token", kLatencyBuckets)),
      prompt_tokens_(registry_.counter("tessera_prompt_tokens_total", "Prompt tokens received")),
      generated_tokens_(registry_.counter("tessera_generation_tokens_total", "Tokens generated")),
      preemptions_(registry_.counter(
          "tessera_preemptions_total",
          "Sequences sent back to the queue because the KV cache ran out of blocks")) {}

void ServeMetrics::http_response(const std::string& route, int status) {
  registry_
      .counter("tessera_http_requests_total", "HTTP requests answered, by route and status",
               {{"route", route}, {"status", std::to_string(status)}})
      .inc();
}

void ServeMetrics::request_finished(std::string_view reason) {
  registry_
      .counter("tessera_requests_finished_total", "Generation requests finished, by reason",
               {{"reason", std::string(reason)}})
      .inc();
}

void ServeMetrics::set_waiting(int64_t requests) { waiting_.set(double(requests)); }
void ServeMetrics::set_running(int64_t sequences) { running_.set(double(sequences)); }

void ServeMetrics::set_kv_blocks(int64_t used, int64_t free) {
  kv_used_.set(double(used));
  kv_free_.set(double(free));
}

void ServeMetrics::time_to_first_token(double seconds) { ttft_.observe(seconds); }
void ServeMetrics::inter_token_latency(double seconds) { itl_.observe(seconds); }
void ServeMetrics::request_latency(double seconds) { latency_.observe(seconds); }
void ServeMetrics::prompt_tokens(int64_t n) { prompt_tokens_.inc(double(n)); }
void ServeMetrics::generated_tokens(int64_t n) { generated_tokens_.inc(double(n)); }
void ServeMetrics::preemption() { preemptions_.inc(); }

std::string ServeMetrics::render() const { return registry_.render(); }

}  // namespace tessera::serve
