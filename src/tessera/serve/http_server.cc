#include "tessera/serve/http_server.h"

#include <httplib.h>

#include <chrono>

namespace tessera::serve {

using nlohmann::json;

namespace {

constexpr auto kKeepAliveEvery = std::chrono::milliseconds(1000);

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.body()); }

// The message of a status httplib answered by itself, before any handler ran.
ApiError library_error(int status) {
  switch (status) {
    case 404:
      return ApiError(404, "no such route", "invalid_request_error", "", "not_found");
    case 413:
      return ApiError(413, "the request body is larger than the server accepts (--max-body-bytes)",
                      "invalid_request_error", "", "request_too_large");
    default:
      return ApiError(status, fmt::format("the request failed with HTTP status {}", status),
                      status >= 500 ? "server_error" : "invalid_request_error");
  }
}

// The route label of a request, from a fixed set so the metric's series stay few.
std::string route_label(const std::string& path) {
  for (const char* route :
       {"/v1/completions", "/v1/chat/completions", "/v1/models", "/health", "/ready", "/metrics"}) {
    if (path == route) return route;
  }
  return "other";
}

// One streamed response's state, kept alive by the content provider until the stream ends.
struct StreamState {
  std::shared_ptr<RequestStream> stream;
  ResponseBuilder builder;
  bool include_usage;
  std::vector<GeneratedToken> tokens;
};

bool write_event(httplib::DataSink& sink, const std::string& event) {
  return sink.write(event.data(), event.size());
}

}  // namespace

HttpServer::HttpServer(ServedModel& served, Engine& engine, ServeMetrics& metrics,
                       const ApiLimits& limits, const HttpOptions& options)
    : served_(served),
      engine_(engine),
      metrics_(metrics),
      limits_(limits),
      options_(options),
      server_(std::make_unique<httplib::Server>()) {
  const EngineOptions& e = engine.options();
  const int threads = options.threads > 0 ? options.threads : int(e.max_running + e.max_queue + 8);
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server_->set_payload_max_length(size_t(options.max_body_bytes));
  // Each streamed token is a small write; Nagle's algorithm would hold it for the client's
  // delayed acknowledgement (40 ms).
  server_->set_tcp_nodelay(true);
  add_routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  int port = options_.port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.host);
  } else if (!server_->bind_to_port(options_.host, port)) {
    port = -1;
  }
  check(port > 0, "cannot listen on {}:{}: the address is taken or invalid (--host, --port)",
        options_.host, options_.port);
  return port;
}

void HttpServer::run() { server_->listen_after_bind(); }

void HttpServer::stop() { server_->stop(); }

bool HttpServer::authorized(const std::string& authorization) const {
  if (options_.api_key.empty()) return true;
  const std::string expected = "Bearer " + options_.api_key;
  if (authorization.size() != expected.size()) return false;
  unsigned char diff = 0;  // compared in full, so the time taken does not reveal the key
  for (size_t i = 0; i < expected.size(); ++i) diff |= authorization[i] ^ expected[i];
  return diff == 0;
}

void HttpServer::add_routes() {
  httplib::Server& s = *server_;
  auto guarded = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(req.get_header_value("Authorization"))) {
        send_error(res, ApiError(401,
                                 "missing or wrong API key: send the header 'Authorization: "
                                 "Bearer <key>'",
                                 "invalid_request_error", "", "invalid_api_key"));
        return;
      }
      handler(req, res);
    };
  };

  auto generate = [this](Endpoint endpoint) {
    return [this, endpoint](const httplib::Request& req, httplib::Response& res) {
      try {
        ApiRequest api = parse_request(endpoint, req.body, limits_);
        const bool stream = api.stream, include_usage = api.include_usage;
        GenerationRequest g = to_generation(std::move(api), *served_.tokenizer, limits_);
        const bool with_logprobs = g.top_logprobs >= 0;
        std::shared_ptr<RequestStream> out;
        try {
          out = engine_.submit(std::move(g));
        } catch (const QueueFull& e) {
          res.set_header("Retry-After", "1");
          throw ApiError(429, e.what(), "rate_limit_error", "", "rate_limit_exceeded");
        } catch (const Error& e) {
          throw ApiError(400, e.what());
        }
        ResponseBuilder builder(endpoint, limits_.model_name, *served_.tokenizer, with_logprobs);
        if (!stream) {
          std::vector<GeneratedToken> all, fresh;
          while (!out->wait(fresh, std::chrono::hours(1))) {
            all.insert(all.end(), std::make_move_iterator(fresh.begin()),
                       std::make_move_iterator(fresh.end()));
          }
          if (out->finish_reason() == FinishReason::kError) {
            throw ApiError(500, "generation failed: " + out->error(), "server_error");
          }
          send_json(res, 200,
                    builder.response(all, out->finish_reason(), out->prompt_tokens(),
                                     out->completion_tokens()));
          return;
        }
        auto state =
            std::make_shared<StreamState>(StreamState{out, std::move(builder), include_usage, {}});
        res.set_header("Cache-Control", "no-cache");
        res.set_chunked_content_provider(
            "text/event-stream",
            [state](size_t, httplib::DataSink& sink) {
              const bool finished = state->stream->wait(state->tokens, kKeepAliveEvery);
              bool ok = true;
              if (!state->tokens.empty()) {
                ok = write_event(sink,
                                 "data: " + dump(state->builder.chunk(state->tokens)) + "\n\n");
              } else if (!finished) {
                ok = write_event(sink, ": waiting\n\n");  // finds a client that has gone
              }
              if (!ok) return false;
              if (!finished) return true;
              const RequestStream& out = *state->stream;
              if (out.finish_reason() == FinishReason::kError) {
                ok = write_event(sink, "data: " +
                                           dump(ApiError(500, "generation failed: " + out.error(),
                                                         "server_error")
                                                    .body()) +
                                           "\n\n");
              } else {
                ok = write_event(
                    sink,
                    "data: " + dump(state->builder.final_chunk(out.finish_reason())) + "\n\n");
                if (ok && state->include_usage) {
                  ok = write_event(sink, "data: " +
                                             dump(state->builder.usage_chunk(
                                                 out.prompt_tokens(), out.completion_tokens())) +
                                             "\n\n");
                }
              }
              if (ok) ok = write_event(sink, "data: [DONE]\n\n");
              if (ok) sink.done();
              return ok;
            },
            [state](bool success) {
              if (!success) state->stream->cancel();
            });
      } catch (const ApiError& e) {
        send_error(res, e);
      }
    };
  };

  s.Post("/v1/completions", guarded(generate(Endpoint::kCompletions)));
  s.Post("/v1/chat/completions", guarded(generate(Endpoint::kChatCompletions)));
  s.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
          json model = {{"id", limits_.model_name},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "tessera"},
                        {"max_model_len", limits_.context}};
          send_json(res, 200, {{"object", "list"}, {"data", json::array({model})}});
        }));
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"status", "ok"}});
  });
  s.Get("/ready", guarded([this](const httplib::Request&, httplib::Response& res) {
          const bool full = engine_.queue_full();
          send_json(res, full ? 503 : 200, {{"status", full ? "queue full" : "ready"}});
        }));
  s.Get("/metrics", guarded([this](const httplib::Request&, httplib::Response& res) {
          res.set_content(metrics_.render(), "text/plain; version=0.0.4");
        }));

  s.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) send_error(res, library_error(res.status));
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          message = e.what();
        } catch (...) {
        }
        send_error(res, ApiError(500, message, "server_error"));
      });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics_.http_response(route_label(req.path), res.status);
  });
}

}  // namespace tessera::serve
