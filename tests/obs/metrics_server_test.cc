// The metrics server as clients meet it: GET and HEAD of its routes, 404 and 405 otherwise, one
// request per connection; a port in use is a clear error; oversized and silent requests get no
// answer and tie up nothing but their own connection.
#include "tessera/obs/metrics_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <boost/asio.hpp>
#include <chrono>
#include <thread>

#include "tests/expect_error.h"

namespace tessera::obs {
namespace {

using tcp = boost::asio::ip::tcp;

HttpRoutes hello() {
  return [](std::string_view path) -> std::optional<HttpContent> {
    if (path == "/hello") return HttpContent{"text/plain", "hi\n"};
    return std::nullopt;
  };
}

TEST(MetricsServer, AnswersItsRoutesAndNothingElse) {
  const MetricsServer server("127.0.0.1", 0, hello(), "--port");
  httplib::Client client("127.0.0.1", server.port());
  auto got = client.Get("/hello?x=1");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "hi\n");
  EXPECT_EQ(got->get_header_value("Content-Type"), "text/plain");
  auto head = client.Head("/hello");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->body, "");
  auto missing = client.Get("/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto post = client.Post("/hello", "", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

TEST(MetricsServer, APortInUseIsAClearError) {
  const MetricsServer first("127.0.0.1", 0, hello(), "--port");
  testing::expect_error(
      [&] { MetricsServer("127.0.0.1", first.port(), hello(), "--metrics-port"); },
      {"cannot serve metrics on 127.0.0.1:" + std::to_string(first.port()), "--metrics-port"});
  testing::expect_error([] { MetricsServer("localhost:1", 0, hello(), "--metrics-port"); },
                        {"not an IP address"});
}

// Silent and oversized clients hold only their own connections: the server answers others
// meanwhile, and closes an oversized request without reading it all.
TEST(MetricsServer, SilentAndOversizedClientsDoNotHoldOthersUp) {
  const MetricsServer server("127.0.0.1", 0, hello(), "--port");
  boost::asio::io_context io;
  std::vector<tcp::socket> silent;
  for (int i = 0; i < 8; ++i) {
    silent.emplace_back(io);
    silent.back().connect({boost::asio::ip::make_address("127.0.0.1"), uint16_t(server.port())});
  }
  const auto start = std::chrono::steady_clock::now();
  httplib::Client client("127.0.0.1", server.port());
  auto got = client.Get("/hello");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));

  tcp::socket big(io);
  big.connect({boost::asio::ip::make_address("127.0.0.1"), uint16_t(server.port())});
  const std::string request =
      "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(64 << 10, 'a') + "\r\n\r\n";
  boost::system::error_code ec;
  boost::asio::write(big, boost::asio::buffer(request), ec);
  char byte = 0;
  const size_t n = boost::asio::read(big, boost::asio::buffer(&byte, 1), ec);
  EXPECT_EQ(n, 0u) << "an oversized request was answered";
  EXPECT_TRUE(ec) << "the connection of an oversized request stayed open";
}

}  // namespace
}  // namespace tessera::obs
