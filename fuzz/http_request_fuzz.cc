// Bytes off a connection are outside input: any bytes, read as one connection's requests by the
// parser the server uses (headers, chunking, bodies, pipelining), must come out as requests the
// API routes and checks, or as a refusal with an HTTP status; never a crash, a hang or an
// exception other than ApiError.
#include <algorithm>
#include <cstdint>
#include <string_view>

#include "tessera/serve/api_routes.h"
#include "tessera/serve/http_parser.h"
#include "tessera/tokenizer/byte_tokenizer.h"

namespace {

namespace http = boost::beast::http;
using namespace tessera::serve;

// Answers one request the way the service would, short of running the engine.
void answer(HttpRequest request) {
  static const tessera::tokenizer::ByteTokenizer tokenizer;
  const RouteOptions options{"key", true, {"tiny", 64, 48}, "/nonexistent-adapters"};
  try {
    RoutedRequest routed = route_request(request, options);
    if (routed.api) to_generation(std::move(*routed.api), tokenizer, options.limits);
    if (routed.adapter_change && routed.route == Route::kLoadAdapter) {
      adapter_path_within(options.lora_dir, routed.adapter_change->path);
    }
  } catch (const ApiError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte sets how much a read brings, as a socket would split the stream.
  const size_t read_size = size_t(data[0]) + 1;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const HttpLimits limits{2048, 4096};
  size_t offset = 0;
  while (offset < input.size()) {
    BeastRequestParser parser;
    configure_parser(parser, limits);
    parser.eager(true);
    boost::system::error_code ec;
    size_t window = read_size;
    for (;;) {
      const size_t left = input.size() - offset;
      const size_t available = std::min(window, left);
      const size_t used = parser.put(boost::asio::buffer(input.data() + offset, available), ec);
      offset += used;
      if (parser.is_done()) break;
      if (ec == http::error::need_more) {
        ec = {};
        if (available == left) {  // everything was offered: the client stopped sending
          parser.put_eof(ec);
          break;
        }
        window = available - used + read_size;  // what is unread, and one more read
      } else if (ec || (used == 0 && available == left)) {
        break;
      } else {
        window = read_size;
      }
    }
    if (ec || !parser.is_done()) {
      if (ec) read_error(ec, limits);
      return 0;
    }
    const bool keep_alive = parser.get().keep_alive();
    answer(to_http_request(parser.release(), std::chrono::steady_clock::now()));
    if (!keep_alive) return 0;
  }
  return 0;
}
