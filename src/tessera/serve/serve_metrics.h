#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/obs/prometheus.h"

namespace tessera::serve {

// The server's signals for dashboards and autoscalers, in Prometheus form, every series labelled
// with the model it serves (model_name, as vLLM labels its own): requests by route and status,
// queue depth and queue time, running sequences, KV blocks and their usage ratio, the prefix
// cache's queries and hits, latencies and token counts. Safe to update from the engine and the
// HTTP threads at once.
class ServeMetrics {
 public:
  explicit ServeMetrics(const std::string &model_name = "tessera");

  void http_response(const std::string &route, int status);
  void set_open_connections(int64_t connections);
  void set_waiting(int64_t requests);
  void set_running(int64_t sequences);
  void set_kv_blocks(int64_t used, int64_t free, int64_t cached);
  void queue_time(double seconds);
  void time_to_first_token(double seconds);
  void inter_token_latency(double seconds);
  void request_latency(double seconds);
  void prompt_tokens(int64_t n);
  void prefill_tokens(int64_t n);
  void prefix_cache_lookup(int64_t queried_tokens, int64_t hit_tokens);
  void generated_tokens(int64_t n);
  void preemption();
  // A draft of `tokens` speculated tokens about to be verified, and then each of them kept.
  void drafted(int64_t tokens);
  void draft_kept();
  // A token sampled under a grammar, whose mask took `seconds` and was `computed` (not kept).
  void masked_token(double seconds, bool computed);
  // The ranks that split the model (tensor parallel, pipeline stages, expert parallel); a model
  // step that took `seconds`, of which `communicating` in the exchanges between its ranks.
  void set_layout(int64_t tensor_parallel, int64_t pipeline_stages, int64_t expert_parallel);
  void model_step(double seconds, double communicating);
  void request_finished(std::string_view reason);  // stop, length, cancelled, error

  std::string render() const;

 private:
  obs::Labels labels(obs::Labels more = {}) const;

  const std::string model_name_;
  obs::Registry registry_;
  obs::Gauge &connections_, &waiting_, &running_, &kv_used_, &kv_free_, &kv_cached_, &kv_usage_,
      &tensor_parallel_, &pipeline_stages_, &expert_parallel_;
  obs::Histogram &queue_time_, &ttft_, &itl_, &latency_;
  obs::Counter &prompt_tokens_, &prefill_tokens_, &prefix_queries_, &prefix_hits_,
      &generated_tokens_, &preemptions_, &steps_, &step_seconds_, &communication_, &drafts_,
      &draft_tokens_, &accepted_tokens_, &masked_tokens_, &mask_seconds_, &masks_computed_,
      &mask_compute_seconds_;
};

}  // namespace tessera::serve
