// A small HTTP server for a process's own numbers (a training run's /metrics, /health and live
// page). It answers GET and HEAD, one request per connection, on a thread of its own: every
// connection is bounded (8 KiB of request, 5 s to send it, 10 s to take the answer, 32 open at
// once), so neither a slow scraper nor a stuck browser can hold the process up or exhaust it.
// Serving OpenAI requests is serve/'s HttpServer; this one only hands out what the process put
// in its routes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace tessera::obs {

struct HttpContent {
  std::string content_type;
  std::string body;
};

// The answer for a path (the request target without its query), or nullopt for 404. Called on
// the server's thread: it must be quick and thread-safe against whoever updates what it reads.
using HttpRoutes = std::function<std::optional<HttpContent>(std::string_view path)>;

class MetricsServer {
 public:
  // Listens on host:port (0 picks a free port) and serves until destroyed. Throws an Error naming
  // the address and `flag` (the option that chose it) when it cannot listen, e.g. the port is in
  // use.
  MetricsServer(const std::string& host, int port, HttpRoutes routes, const std::string& flag);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::obs
