#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/obs/prometheus.h"

namespace tessera::serve {

// The server's signals for dashboards and autoscalers, in Prometheus form: requests by route and
// status, queue depth, running sequences, KV blocks, latencies and token counts. Safe to update
// from the engine and the HTTP threads at once.
class ServeMetrics {
 public:
  ServeMetrics();

  void http_response(const std::string &route, int status);
  void set_waiting(int64_t requests);
  void set_running(int64_t sequences);
  void set_kv_blocks(int64_t used, int64_t free);
  void time_to_first_token(double seconds);
  void inter_token_latency(double seconds);
  void request_latency(double seconds);
  void prompt_tokens(int64_t n);
  void generated_tokens(int64_t n);
  void preemption();
  void request_finished(std::string_view reason);  // stop, length, cancelled, error

  std::string render() const;

 private:
  obs::Registry registry_;
  obs::Gauge &waiting_, &running_, &kv_used_, &kv_free_;
  obs::Histogram &ttft_, &itl_, &latency_;
  obs::Counter &prompt_tokens_, &generated_tokens_, &preemptions_;
};

}  // namespace tessera::serve
