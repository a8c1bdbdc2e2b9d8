#include "tessera/serve/api_service.h"

#include <spdlog/spdlog.h>

namespace tessera::serve {

using nlohmann::json;

namespace {

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = json_text(body);
  return r;
}

}  // namespace

HttpResponse error_response(const ApiError& error) {
  HttpResponse r = json_response(error.status(), error.body());
  r.headers = error.headers();
  return r;
}

ApiService::ApiService(ServedModel& served, Engine& engine, ServeMetrics& metrics,
                       RouteOptions options)
    : served_(served),
      engine_(engine),
      metrics_(metrics),
      options_(std::move(options)),
      formats_(*served.tokenizer, served.config().vocab_size) {}

ApiReply ApiService::handle(const HttpRequest& request) {
  try {
    RoutedRequest routed = route_request(request, options_);
    switch (routed.route) {
      case Route::kCompletions:
      case Route::kChatCompletions:
        return generate(std::move(routed), request.arrival);
      case Route::kTokenize: {
        const std::vector<int32_t> tokens =
            prompt_tokens(*routed.api, *served_.tokenizer, served_.chat_template_or_null());
        return json_response(200, {{"count", tokens.size()},
                                   {"max_model_len", options_.limits.context},
                                   {"tokens", tokens}});
      }
      case Route::kModels: {
        // The model, then each of its LoRA adapters, which vLLM lists with the model as parent.
        const ApiLimits& limits = options_.limits;
        json models = json::array();
        models.push_back({{"id", limits.model_name},
                          {"object", "model"},
                          {"created", 0},
                          {"owned_by", "tessera"},
                          {"root", limits.model_name},
                          {"parent", nullptr},
                          {"max_model_len", limits.context}});
        const std::vector<std::string> adapters =
            served_.adapters != nullptr ? served_.adapters->names() : std::vector<std::string>();
        for (const std::string& adapter : adapters) {
          models.push_back({{"id", adapter},
                            {"object", "model"},
                            {"created", 0},
                            {"owned_by", "tessera"},
                            {"root", adapter},
                            {"parent", limits.model_name},
                            {"max_model_len", limits.context}});
        }
        return json_response(200, {{"object", "list"}, {"data", models}});
      }
      case Route::kLoadAdapter:
      case Route::kUnloadAdapter:
        return change_adapters(routed.route, *routed.adapter_change);
      case Route::kHealth:
        return json_response(200, {{"status", "ok"}});
      case Route::kReady: {
        const char* state = draining_ ? "draining" : engine_.queue_full() ? "queue full" : nullptr;
        return json_response(state != nullptr ? 503 : 200, {{"status", state ? state : "ready"}});
      }
      case Route::kMetrics: {
        HttpResponse r;
        r.content_type = "text/plain; version=0.0.4";
        r.body = metrics_.render();
        return r;
      }
    }
    throw ApiError(500, "unhandled route", "server_error");
  } catch (const ApiError& e) {
    return error_response(e);
  } catch (const std::exception& e) {
    return error_response(ApiError(500, e.what(), "server_error"));
  }
}

HttpResponse ApiService::change_adapters(Route route, const AdapterChange& change) {
  // vLLM's answers: a sentence of plain text on success, an error object otherwise.
  HttpResponse r;
  r.content_type = "text/plain";
  if (route == Route::kUnloadAdapter) {
    if (served_.adapters == nullptr || !served_.adapters->unload(change.name)) {
      throw ApiError(404, fmt::format("no LoRA adapter named {} is served", json_text(change.name)),
                     "invalid_request_error", "lora_name", "not_found");
    }
    spdlog::info("LoRA adapter '{}' unloaded", change.name);
    r.body = fmt::format("Success: LoRA adapter '{}' removed successfully.", change.name);
    return r;
  }
  if (served_.adapters == nullptr) {
    throw ApiError(400, "the server holds no adapter slots (--max-loras 0)");
  }
  const std::filesystem::path path = adapter_path_within(options_.lora_dir, change.path);
  try {
    served_.adapters->load(change.name, path);
  } catch (const Error& e) {
    throw ApiError(400, e.what(), "invalid_request_error", "lora_path");
  }
  spdlog::info("LoRA adapter '{}' loaded from {}", change.name, path.string());
  r.body = fmt::format("Success: LoRA adapter '{}' added successfully.", change.name);
  return r;
}

ApiReply ApiService::generate(RoutedRequest routed, std::chrono::steady_clock::time_point arrival) {
  if (draining_) {
    throw ApiError(503, kShutdownMessage, "server_error", "", "server_shutting_down")
        .with_header("Retry-After", "1");
  }
  ApiRequest api = std::move(*routed.api);
  const bool stream = api.stream, include_usage = api.include_usage;
  std::string model = api.model;
  const Endpoint endpoint = api.endpoint;
  std::vector<std::string> tool_names =
      api.tools.calls() ? api.tools.names : std::vector<std::string>();
  if (api.response_grammar) {
    api.generation.grammar = formats_.bind(api.response_key, *api.response_grammar);
  }
  std::shared_ptr<const AdapterLease> adapter;
  if (!api.adapter.empty()) {
    // The adapter may have been unloaded since the request was checked.
    adapter = served_.adapters->lease(api.adapter);
    if (adapter == nullptr) throw unknown_model(model, options_.limits);
  }
  GenerationRequest g = to_generation(std::move(api), *served_.tokenizer, options_.limits,
                                      served_.chat_template_or_null());
  g.adapter = std::move(adapter);
  const bool with_logprobs = g.top_logprobs >= 0;
  g.arrival = arrival;
  std::shared_ptr<RequestStream> out;
  try {
    out = engine_.submit(std::move(g));
  } catch (const QueueFull& e) {
    throw ApiError(429, e.what(), "rate_limit_error", "", "rate_limit_exceeded")
        .with_header("Retry-After", "1");
  } catch (const Error& e) {
    if (draining_) {
      throw ApiError(503, e.what(), "server_error", "", "server_shutting_down")
          .with_header("Retry-After", "1");
    }
    throw ApiError(400, e.what());
  }
  return std::make_shared<GenerationReply>(
      out,
      ResponseBuilder(endpoint, std::move(model), *served_.tokenizer, with_logprobs,
                      std::move(tool_names)),
      stream, include_usage);
}

}  // namespace tessera::serve
