// The server's request parser read the way a socket delivers bytes: in pieces of any size, each
// read adding to what the parser has not yet consumed.
#include "tessera/serve/http_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

namespace tessera::serve {
namespace {

namespace http = boost::beast::http;

struct Parsed {
  bool done = false;
  boost::system::error_code error;
  std::string body;
};

// Offers `stream` to one parser `read_size` bytes per read, as a read loop over one buffer does.
Parsed parse_in_reads(std::string_view stream, size_t read_size) {
  BeastRequestParser parser;
  configure_parser(parser, HttpLimits{2048, 4096});
  parser.eager(true);
  size_t consumed = 0, received = 0;
  Parsed result;
  while (!parser.is_done()) {
    if (received == stream.size()) {
      parser.put_eof(result.error);
      break;
    }
    received = std::min(stream.size(), received + read_size);
    boost::system::error_code ec;
    consumed += parser.put(boost::asio::buffer(stream.data() + consumed, received - consumed), ec);
    if (ec && ec != http::error::need_more) {
      result.error = ec;
      break;
    }
  }
  result.done = parser.is_done();
  if (result.done) result.body = parser.get().body();
  return result;
}

const std::string kChunkedHead =
    "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n";

TEST(HttpParser, AnEmptyChunkedBodyArrivingAByteAtATimeIsARequest) {
  // The last chunk arrives as "0\r\n", "\r", "\n": the parser is asked again with fewer than the
  // five bytes Boost 1.81's Beast asserts on, which a Debug server must survive.
  for (size_t read_size : {1, 2, 3, 7}) {
    const Parsed parsed = parse_in_reads(kChunkedHead + "0\r\n\r\n", read_size);
    EXPECT_TRUE(parsed.done) << read_size << ": " << parsed.error.message();
    EXPECT_EQ(parsed.body, "") << read_size;
  }
}

TEST(HttpParser, ChunksSplitAtEveryReadSizeGiveTheSameBody) {
  const std::string body = R"({"model":"tiny","prompt":"In"})";
  const std::string stream = kChunkedHead + "a\r\n" + body.substr(0, 10) + "\r\n14\r\n" +
                             body.substr(10) + "\r\n0\r\n\r\n";
  for (size_t read_size = 1; read_size <= stream.size(); ++read_size) {
    const Parsed parsed = parse_in_reads(stream, read_size);
    ASSERT_TRUE(parsed.done) << read_size << ": " << parsed.error.message();
    EXPECT_EQ(parsed.body, body) << read_size;
  }
}

TEST(HttpParser, AChunkedBodyCutShortIsAPartialMessage) {
  const Parsed parsed = parse_in_reads(kChunkedHead + "5\r\nab", 4);
  EXPECT_FALSE(parsed.done);
  EXPECT_EQ(parsed.error, http::error::partial_message);
  ASSERT_TRUE(read_error(parsed.error, HttpLimits{2048, 4096}).has_value());
  EXPECT_EQ(read_error(parsed.error, HttpLimits{2048, 4096})->status(), 400);
}

}  // namespace
}  // namespace tessera::serve
