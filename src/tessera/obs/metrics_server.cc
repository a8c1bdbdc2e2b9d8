#include "tessera/obs/metrics_server.h"

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <thread>

#include "tessera/core/error.h"

namespace tessera::obs {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr size_t kMaxRequestBytes = 8 << 10;
constexpr std::chrono::seconds kReadTimeout{5}, kWriteTimeout{10};
constexpr int kMaxConnections = 32;
constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);

http::response<http::string_body> answer(const http::request<http::empty_body>& request,
                                         const HttpRoutes& routes) {
  http::response<http::string_body> response;
  response.version(request.version());
  response.keep_alive(false);
  response.set(http::field::cache_control, "no-store");
  const bool head = request.method() == http::verb::head;
  if (request.method() != http::verb::get && !head) {
    response.result(http::status::method_not_allowed);
    response.set(http::field::allow, "GET, HEAD");
    response.set(http::field::content_type, "text/plain");
    response.body() = "only GET and HEAD are served here\n";
  } else {
    const std::string_view target = request.target();
    std::optional<HttpContent> content = routes(target.substr(0, target.find('?')));
    if (!content) {
      response.result(http::status::not_found);
      response.set(http::field::content_type, "text/plain");
      response.body() = "not found\n";
    } else {
      response.result(http::status::ok);
      response.set(http::field::content_type, content->content_type);
      response.body() = std::move(content->body);
    }
  }
  response.prepare_payload();
  if (head) response.body().clear();
  return response;
}

}  // namespace

class MetricsServer::Impl {
 public:
  Impl(const std::string& host, int port, HttpRoutes routes, const std::string& flag)
      : routes_(std::move(routes)) {
    beast::error_code ec;
    const asio::ip::address address = asio::ip::make_address(host, ec);
    check(!ec, "cannot serve metrics on {}: it is not an IP address", host);
    const tcp::endpoint endpoint(address, uint16_t(port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    check(!ec, "cannot serve metrics on {}:{}: {} ({})", host, port, ec.message(), flag);
    port_ = acceptor_.local_endpoint().port();
    asio::co_spawn(io_, accept_loop(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }

  ~Impl() {
    io_.stop();
    thread_.join();
  }

  int port() const { return port_; }

 private:
  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor_.async_accept(kAwait);
      if (!acceptor_.is_open()) co_return;
      if (ec) continue;
      if (open_.load() >= kMaxConnections) continue;  // the socket closes as it goes
      asio::co_spawn(io_, session(std::move(socket)), asio::detached);
    }
  }

  asio::awaitable<void> session(tcp::socket socket) {
    ++open_;
    struct Close {
      std::atomic<int>& open;
      ~Close() { --open; }
    } close{open_};
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer(kMaxRequestBytes);
    http::request_parser<http::empty_body> parser;
    parser.header_limit(kMaxRequestBytes);
    stream.expires_after(kReadTimeout);
    auto [ec, bytes] = co_await http::async_read(stream, buffer, parser, kAwait);
    if (ec) co_return;  // a malformed, oversized, bodied or too slow request gets no answer
    http::response<http::string_body> response = answer(parser.get(), routes_);
    stream.expires_after(kWriteTimeout);
    std::tie(ec, bytes) = co_await http::async_write(stream, response, kAwait);
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  HttpRoutes routes_;
  int port_ = 0;
  std::atomic<int> open_{0};
  std::thread thread_;
  // Last, so that the coroutines it destroys find everything above still alive.
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
};

MetricsServer::MetricsServer(const std::string& host, int port, HttpRoutes routes,
                             const std::string& flag)
    : impl_(std::make_unique<Impl>(host, port, std::move(routes), flag)) {}

MetricsServer::~MetricsServer() = default;

int MetricsServer::port() const { return impl_->port(); }

}  // namespace tessera::obs
