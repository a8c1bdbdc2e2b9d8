#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tessera::serve {

// An HTTP request as the API sees it, whatever read it off the wire: the fields it uses and the
// whole body.
struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // the path, with any query
  int version = 11;    // 10 or 11
  bool keep_alive = true;
  std::string authorization, content_type;
  std::string body;
  // When its first byte arrived: a generation's queue time and time to first token count from it.
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();

  // The target without its query string.
  std::string path() const { return target.substr(0, target.find('?')); }
};

// A whole answer (a streamed one is a GenerationReply).
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// How much of a request the server reads.
struct HttpLimits {
  int64_t max_header_bytes = int64_t(16) << 10;  // request line and headers
  int64_t max_body_bytes = int64_t(1) << 20;     // after de-chunking, so chunked bodies too
};

}  // namespace tessera::serve
