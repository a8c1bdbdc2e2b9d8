#include "tessera/serve/http_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <thread>
#include <vector>

#include "tessera/serve/http_parser.h"

namespace tessera::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
// How often an idle connection looks for a drain, and a generation without news for a client
// that has gone (a whole one) or sends a keep-alive comment (a streamed one).
constexpr auto kPollEvery = std::chrono::milliseconds(1000);
constexpr auto kDrainPoll = std::chrono::milliseconds(20);
// After a drain has ended the last generations, how long their final events may take to go out.
constexpr auto kFlushAfterDrain = std::chrono::seconds(5);
// Before closing, what the client still sends is read and dropped, within these bounds: closing
// with unread bytes would reset the connection and could destroy the answer before it is read.
constexpr auto kLingerTime = std::chrono::seconds(1);
constexpr size_t kLingerBytes = size_t(1) << 20;

bool is_http_error(const beast::error_code& ec) {
  return ec.category() == make_error_code(http::error::end_of_stream).category();
}

// An orderly close (or a reset) by the peer, seen without reading what it may have sent.
bool peer_closed(tcp::socket& socket) {
  char byte;
  const ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

// Clears a request stream's listener when the connection is done with it.
struct ListenerGuard {
  RequestStream& stream;
  ~ListenerGuard() { stream.set_listener({}); }
};

struct ConnectionCount {
  std::atomic<int64_t>& open;
  ServeMetrics& metrics;
  int64_t now;
  ConnectionCount(std::atomic<int64_t>& o, ServeMetrics& m) : open(o), metrics(m), now(++o) {
    metrics.set_open_connections(now);
  }
  ~ConnectionCount() { metrics.set_open_connections(--open); }
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(ApiService& service, ServeMetrics& metrics, const HttpOptions& options)
      : service_(service), metrics_(metrics), options_(options) {}

  int bind();
  void run();
  void drain(std::chrono::milliseconds grace);

 private:
  asio::awaitable<void> accept_loop();
  asio::awaitable<void> session(tcp::socket socket);
  asio::awaitable<bool> wait_for_request(beast::tcp_stream& stream, Clock::duration timeout);
  asio::awaitable<void> answer_unreadable(beast::tcp_stream& stream, const beast::error_code& ec);
  asio::awaitable<bool> write_response(beast::tcp_stream& stream, int version,
                                       std::string_view route, HttpResponse response,
                                       bool keep_alive);
  asio::awaitable<bool> write_generation(beast::tcp_stream& stream, const HttpRequest& request,
                                         GenerationReply& reply, bool keep_alive);
  asio::awaitable<void> close_gracefully(beast::tcp_stream& stream);
  asio::awaitable<void> drain_then_stop(Clock::duration grace);
  asio::awaitable<void> sleep(Clock::duration d);

  ApiService& service_;
  ServeMetrics& metrics_;
  const HttpOptions options_;
  std::atomic<int64_t> connections_ = 0;
  std::atomic<bool> draining_ = false;
  // Last, so that the coroutines it destroys find everything above still alive.
  asio::io_context io_;
  tcp::acceptor acceptor_{io_};
};

int HttpServer::Impl::bind() {
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(options_.host, ec);
  check(!ec, "cannot listen on {}: it is not an IP address (--host)", options_.host);
  const tcp::endpoint endpoint(address, uint16_t(options_.port));
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  check(!ec, "cannot listen on {}:{}: {} (--host, --port)", options_.host, options_.port,
        ec.message());
  return acceptor_.local_endpoint().port();
}

void HttpServer::Impl::run() {
  asio::co_spawn(io_, accept_loop(), asio::detached);
  std::vector<std::thread> helpers;
  for (int i = 1; i < options_.threads; ++i) helpers.emplace_back([this] { io_.run(); });
  io_.run();
  for (std::thread& t : helpers) t.join();
}

void HttpServer::Impl::drain(std::chrono::milliseconds grace) {
  asio::post(io_, [this, grace] {
    if (draining_.exchange(true)) return;
    beast::error_code ignored;
    acceptor_.close(ignored);
    service_.begin_drain();
    asio::co_spawn(io_, drain_then_stop(grace), asio::detached);
  });
}

asio::awaitable<void> HttpServer::Impl::sleep(Clock::duration d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  co_await timer.async_wait(kAwait);
}

asio::awaitable<void> HttpServer::Impl::drain_then_stop(Clock::duration grace) {
  const auto deadline = Clock::now() + grace;
  spdlog::info("draining: no new connections; {} generations unfinished, {:.0f} s to finish",
               service_.unfinished(), std::chrono::duration<double>(grace).count());
  while (service_.unfinished() > 0 && Clock::now() < deadline) co_await sleep(kDrainPoll);
  const int64_t cut = service_.unfinished();
  service_.end_unfinished();
  if (cut > 0) spdlog::info("draining: ended {} unfinished generations", cut);
  const auto flush_deadline = Clock::now() + kFlushAfterDrain;
  while (connections_ > 0 && Clock::now() < flush_deadline) co_await sleep(kDrainPoll);
  io_.stop();
}

asio::awaitable<void> HttpServer::Impl::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor_.async_accept(asio::make_strand(io_), kAwait);
    if (!acceptor_.is_open()) co_return;
    if (ec) {
      // Out of file descriptors, most likely: connections wait in the backlog meanwhile.
      spdlog::warn("http: accepting a connection failed: {}", ec.message());
      co_await sleep(std::chrono::milliseconds(50));
      continue;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);  // each streamed token is a small write
    const auto executor = socket.get_executor();
    asio::co_spawn(executor, session(std::move(socket)), [](std::exception_ptr e) {
      if (!e) return;
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& x) {
        spdlog::error("http: a connection failed: {}", x.what());
      }
    });
  }
}

asio::awaitable<void> HttpServer::Impl::session(tcp::socket socket) {
  const ConnectionCount count(connections_, metrics_);
  beast::tcp_stream stream(std::move(socket));
  if (count.now > options_.max_connections) {
    const ApiError full = ApiError(503,
                                   fmt::format("the server has {} connections open, its limit "
                                               "(--max-connections); retry later",
                                               options_.max_connections),
                                   "server_error", "", "too_many_connections")
                              .with_header("Retry-After", "1");
    co_await write_response(stream, 11, "other", error_response(full), false);
    co_await close_gracefully(stream);
    co_return;
  }
  beast::flat_buffer buffer(
      size_t(std::max<int64_t>(2 * options_.limits.max_header_bytes, 1 << 16)));
  for (bool first = true;; first = false) {
    if (buffer.size() == 0 && !co_await wait_for_request(stream, first ? options_.header_timeout
                                                                       : options_.idle_timeout)) {
      co_return;  // nothing was sent: nothing to answer
    }
    const auto arrival = Clock::now();
    BeastRequestParser parser;
    configure_parser(parser, options_.limits);
    stream.expires_after(options_.header_timeout);
    auto [ec, bytes] = co_await http::async_read_header(stream, buffer, parser, kAwait);
    if (!ec && beast::iequals(parser.get()[http::field::expect], "100-continue")) {
      http::response<http::empty_body> proceed{http::status::continue_, 11};
      stream.expires_after(options_.write_timeout);
      std::tie(ec, bytes) = co_await http::async_write(stream, proceed, kAwait);
    }
    if (!ec) {
      stream.expires_after(options_.body_timeout);
      std::tie(ec, bytes) = co_await http::async_read(stream, buffer, parser, kAwait);
    }
    if (ec) {
      co_await answer_unreadable(stream, ec);
      co_return;
    }
    stream.expires_never();
    const HttpRequest request = to_http_request(parser.release(), arrival);
    const bool keep_alive = request.keep_alive && !draining_;
    ApiReply reply = service_.handle(request);
    bool ok;
    if (auto* whole = std::get_if<HttpResponse>(&reply)) {
      ok = co_await write_response(stream, request.version, route_label(request.path()),
                                   std::move(*whole), keep_alive);
    } else {
      ok = co_await write_generation(
          stream, request, *std::get<std::shared_ptr<GenerationReply>>(reply), keep_alive);
    }
    if (!ok) co_return;
    if (!keep_alive || draining_) break;
  }
  co_await close_gracefully(stream);
}

// Waits in slices of kPollEvery for the first byte of a request, so an idle connection closes
// within a slice of a drain starting. False when the connection closed, timed out or drains.
asio::awaitable<bool> HttpServer::Impl::wait_for_request(beast::tcp_stream& stream,
                                                         Clock::duration timeout) {
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    timer.expires_after(std::min<Clock::duration>(kPollEvery, deadline - Clock::now()));
    auto result = co_await (stream.socket().async_wait(tcp::socket::wait_read, kAwait) ||
                            timer.async_wait(kAwait));
    if (result.index() == 0) co_return !std::get<0>(std::get<0>(result));
    if (draining_ || Clock::now() >= deadline) co_return false;
  }
}

// A request that could not be read. After a timeout the stream has already closed the socket;
// otherwise a malformed, oversized or cut-short request is told why before the connection closes.
asio::awaitable<void> HttpServer::Impl::answer_unreadable(beast::tcp_stream& stream,
                                                          const beast::error_code& ec) {
  if (!is_http_error(ec)) co_return;
  const std::optional<ApiError> error = read_error(ec, options_.limits);
  if (!error) co_return;
  if (co_await write_response(stream, 11, "other", error_response(*error), false)) {
    co_await close_gracefully(stream);
  }
}

// write_response and write_generation return whether the connection may carry another request.
asio::awaitable<bool> HttpServer::Impl::write_response(beast::tcp_stream& stream, int version,
                                                       std::string_view route,
                                                       HttpResponse response, bool keep_alive) {
  http::response<http::string_body> message;
  message.version(unsigned(version));
  message.result(unsigned(response.status));
  message.set(http::field::server, "tessera");
  message.set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) message.set(name, value);
  message.keep_alive(keep_alive);
  message.body() = std::move(response.body);
  message.prepare_payload();
  stream.expires_after(options_.write_timeout);
  auto [ec, bytes] = co_await http::async_write(stream, message, kAwait);
  stream.expires_never();
  metrics_.http_response(std::string(route), response.status);
  co_return !ec;
}

asio::awaitable<bool> HttpServer::Impl::write_generation(beast::tcp_stream& stream,
                                                         const HttpRequest& request,
                                                         GenerationReply& reply, bool keep_alive) {
  // The engine's thread wakes this coroutine by cancelling its timer on the connection's strand;
  // tokens are always taken before waiting, so a wake-up that lands during a write is not lost.
  auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor);
  reply.stream().set_listener([weak = std::weak_ptr(timer), executor = timer->get_executor()] {
    asio::post(executor, [weak] {
      if (auto t = weak.lock()) t->cancel();
    });
  });
  const ListenerGuard unlisten{reply.stream()};
  const std::string route(route_label(request.path()));
  std::vector<GeneratedToken> tokens;

  if (!reply.streaming()) {
    for (;;) {
      const bool finished = reply.stream().wait(tokens, std::chrono::milliseconds(0));
      reply.collect(tokens);
      if (finished) break;
      timer->expires_after(kPollEvery);
      co_await timer->async_wait(kAwait);
      if (peer_closed(stream.socket())) {
        reply.stream().cancel();
        co_return false;
      }
    }
    co_return co_await write_response(stream, request.version, route, reply.response(), keep_alive);
  }

  // HTTP/1.0 has no chunked encoding: the stream ends when the connection closes.
  const bool chunked = request.version >= 11;
  http::response<http::empty_body> head{http::status::ok, unsigned(request.version)};
  head.set(http::field::server, "tessera");
  head.set(http::field::content_type, "text/event-stream");
  head.set(http::field::cache_control, "no-cache");
  head.keep_alive(chunked && keep_alive);
  if (chunked) head.chunked(true);
  http::response_serializer<http::empty_body> serializer(head);
  stream.expires_after(options_.write_timeout);
  auto [ec, bytes] = co_await http::async_write_header(stream, serializer, kAwait);
  metrics_.http_response(route, 200);
  for (bool finished = false; !ec && !finished;) {
    finished = reply.stream().wait(tokens, std::chrono::milliseconds(0));
    std::string text = reply.events(tokens);
    if (finished) text += reply.end_events();
    if (text.empty()) {
      timer->expires_after(kPollEvery);
      const auto [woken] = co_await timer->async_wait(kAwait);
      if (woken) continue;
      text = GenerationReply::kKeepAliveEvent;
    }
    stream.expires_after(options_.write_timeout);
    if (chunked) {
      std::tie(ec, bytes) =
          co_await asio::async_write(stream, http::make_chunk(asio::buffer(text)), kAwait);
    } else {
      std::tie(ec, bytes) = co_await asio::async_write(stream, asio::buffer(text), kAwait);
    }
  }
  if (!ec && chunked) {
    std::tie(ec, bytes) = co_await asio::async_write(stream, http::make_chunk_last(), kAwait);
  }
  stream.expires_never();
  if (ec) {
    reply.stream().cancel();  // the client went away or stopped reading
    co_return false;
  }
  if (!chunked) co_await close_gracefully(stream);
  co_return chunked;
}

asio::awaitable<void> HttpServer::Impl::close_gracefully(beast::tcp_stream& stream) {
  beast::error_code ec;
  stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  if (ec) co_return;
  std::vector<char> sink(1 << 14);
  size_t dropped = 0;
  stream.expires_after(kLingerTime);
  while (dropped < kLingerBytes) {
    auto [read_ec, n] = co_await stream.async_read_some(asio::buffer(sink), kAwait);
    if (read_ec) break;
    dropped += n;
  }
  stream.expires_never();
}

HttpServer::HttpServer(ApiService& service, ServeMetrics& metrics, const HttpOptions& options)
    : impl_(std::make_unique<Impl>(service, metrics, options)) {}
HttpServer::~HttpServer() = default;
int HttpServer::bind() { return impl_->bind(); }
void HttpServer::run() { impl_->run(); }
void HttpServer::drain(std::chrono::milliseconds grace) { impl_->drain(grace); }

}  // namespace tessera::serve
