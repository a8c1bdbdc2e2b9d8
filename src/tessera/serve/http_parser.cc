#include "tessera/serve/http_parser.h"

namespace tessera::serve {

namespace http = boost::beast::http;

void configure_parser(BeastRequestParser& parser, const HttpLimits& limits) {
  parser.header_limit(uint32_t(limits.max_header_bytes));
  parser.body_limit(uint64_t(limits.max_body_bytes));
}

HttpRequest to_http_request(BeastRequest message, std::chrono::steady_clock::time_point arrival) {
  HttpRequest r;
  r.method = std::string(message.method_string());
  r.target = std::string(message.target());
  r.version = int(message.version());
  r.keep_alive = message.keep_alive();
  r.authorization = std::string(message[http::field::authorization]);
  r.content_type = std::string(message[http::field::content_type]);
  r.body = std::move(message.body());
  r.arrival = arrival;
  return r;
}

std::optional<ApiError> read_error(const boost::system::error_code& ec, const HttpLimits& limits) {
  if (ec == http::error::end_of_stream) return std::nullopt;
  if (ec == http::error::body_limit) {
    return ApiError(413,
                    fmt::format("the request body is larger than the server accepts ({} bytes, "
                                "--max-body-bytes)",
                                limits.max_body_bytes),
                    "invalid_request_error", "", "request_too_large");
  }
  if (ec == http::error::header_limit) {
    return ApiError(431,
                    fmt::format("the request's headers are larger than the server accepts ({} "
                                "bytes)",
                                limits.max_header_bytes),
                    "invalid_request_error", "", "headers_too_large");
  }
  if (ec == http::error::partial_message) {
    return ApiError(400, "the request ended before its body was complete");
  }
  return ApiError(400, fmt::format("the request is not valid HTTP/1.1: {}", ec.message()));
}

}  // namespace tessera::serve
