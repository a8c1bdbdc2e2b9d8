#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <variant>

#include "tessera/serve/api_routes.h"
#include "tessera/serve/engine.h"
#include "tessera/serve/generation_reply.h"
#include "tessera/serve/http_message.h"
#include "tessera/serve/response_formats.h"
#include "tessera/serve/serve_metrics.h"

namespace tessera::serve {

// A whole response, or a generation the transport writes as it runs.
using ApiReply = std::variant<HttpResponse, std::shared_ptr<GenerationReply>>;

// The OpenAI-compatible API over an engine, independent of how requests arrive: /v1/completions
// and /v1/chat/completions (streamed or whole), /v1/models, vLLM's /tokenize and LoRA adapter
// routes, /health, /ready and /metrics. It also
// holds the server's drain state: once draining, /ready answers 503 and new generations are
// refused with 503, while those already running carry on.
class ApiService {
 public:
  ApiService(ServedModel& served, Engine& engine, ServeMetrics& metrics, RouteOptions options);

  // Answers a request; never throws (a failure inside is a 500).
  ApiReply handle(const HttpRequest& request);

  void begin_drain() { draining_ = true; }
  bool draining() const { return draining_; }
  // Generations submitted and not yet finished.
  int64_t unfinished() const { return engine_.unfinished(); }
  // Ends every unfinished generation: streams get an error event and [DONE], whole requests a
  // 503.
  void end_unfinished() { engine_.stop(kShutdownMessage); }

  static constexpr const char* kShutdownMessage = "the server is shutting down; retry elsewhere";

 private:
  ApiReply generate(RoutedRequest routed, std::chrono::steady_clock::time_point arrival);
  HttpResponse change_adapters(Route route, const AdapterChange& change);

  ServedModel& served_;
  Engine& engine_;
  ServeMetrics& metrics_;
  const RouteOptions options_;
  ResponseFormats formats_;
  std::atomic<bool> draining_ = false;
};

// The JSON error answer of an ApiError.
HttpResponse error_response(const ApiError& error);

}  // namespace tessera::serve
