// Reading HTTP/1.x requests with Boost.Beast's parser, bounded: the server's connections and the
// request-parser fuzz target configure it here, so both read requests the same way.
#pragma once

#include <boost/beast/http.hpp>
#include <chrono>
#include <cstdint>
#include <optional>

#include "tessera/serve/http_message.h"
#include "tessera/serve/openai_api.h"

namespace tessera::serve {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using BeastRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

void configure_parser(BeastRequestParser& parser, const HttpLimits& limits);

HttpRequest to_http_request(BeastRequest message, std::chrono::steady_clock::time_point arrival);

// What a client whose request could not be read is told: 413 for a body over the limit (by its
// Content-Length or as chunks arrive), 431 for headers over theirs, 400 for anything malformed
// or cut short. nullopt when the connection simply ended between requests.
std::optional<ApiError> read_error(const boost::system::error_code& ec, const HttpLimits& limits);

}  // namespace tessera::serve
