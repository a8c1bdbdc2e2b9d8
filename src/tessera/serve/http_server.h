#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tessera/serve/api_service.h"
#include "tessera/serve/http_message.h"
#include "tessera/serve/serve_metrics.h"

namespace tessera::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 picks a free port
  HttpLimits limits;
  // Each bounds the whole of its phase, however slowly the bytes trickle in: the request line and
  // headers (from the request's first byte), the body, the wait for a keep-alive connection's
  // next request, and each write to a client that has stopped reading.
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{30'000};
  std::chrono::milliseconds idle_timeout{60'000};
  std::chrono::milliseconds write_timeout{30'000};
  // Connections open at once; one more is answered 503 and closed.
  int64_t max_connections = 1024;
  int threads = 1;  // threads running the event loop
};

// HTTP/1.1 over an event loop (Boost.Beast on Asio): every connection is a coroutine, so idle,
// slow and streaming clients cost no thread. Requests on a connection are answered in order
// (pipelining), keep-alive connections close after idle_timeout, and every phase of reading and
// writing has its deadline. A streamed generation is written as its tokens arrive, chunked for
// HTTP/1.1 clients and delimited by closing the connection for HTTP/1.0 ones.
class HttpServer {
 public:
  HttpServer(ApiService& service, ServeMetrics& metrics, const HttpOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens, with the kernel's largest backlog; returns the port. Throws naming the
  // address when it cannot.
  int bind();
  // Serves until a drain has finished.
  void run();
  // From any thread: stops accepting, lets unfinished generations run for up to `grace`, ends the
  // rest (streams get an error event and [DONE]), waits briefly for the last bytes to go out,
  // then makes run() return.
  void drain(std::chrono::milliseconds grace);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
