#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/serve/engine.h"
#include "tessera/serve/openai_api.h"
#include "tessera/serve/serve_metrics.h"

namespace httplib {
class Server;
}

namespace tessera::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;      // 0 picks a free port
  std::string api_key;  // empty: no authentication
  int64_t max_body_bytes = int64_t(1) << 20;
  // Connections served at once; a streaming request holds one for its whole life.
  int threads = 0;  // 0: enough for every running and queued request, plus a few to spare
};

// The OpenAI-compatible HTTP API over an engine: /v1/completions, /v1/chat/completions (both
// streamable as server-sent events), /v1/models, /health, /ready and /metrics.
class HttpServer {
 public:
  HttpServer(ServedModel& served, Engine& engine, ServeMetrics& metrics, const ApiLimits& limits,
             const HttpOptions& options);
  ~HttpServer();

  // Binds the socket and returns the port; throws naming the address when it cannot.
  int bind();
  // Serves until stop() (which any thread, or a signal handler's helper thread, may call).
  void run();
  void stop();

 private:
  void add_routes();
  bool authorized(const std::string& authorization) const;

  ServedModel& served_;
  Engine& engine_;
  ServeMetrics& metrics_;
  const ApiLimits limits_;
  const HttpOptions options_;
  std::unique_ptr<httplib::Server> server_;
};

}  // namespace tessera::serve
