#include "tessera/serve/api_routes.h"

#include <algorithm>
#include <cctype>
#include <vector>

namespace tessera::serve {

namespace {

const RouteSpec* find_route(std::string_view path) {
  for (const RouteSpec& spec : kRoutes) {
    if (spec.path == path) return &spec;
  }
  return nullptr;
}

// Compared in full, so the time taken does not reveal how much of the key was right.
bool same_secret(std::string_view given, std::string_view expected) {
  if (given.size() != expected.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < expected.size(); ++i) diff |= given[i] ^ expected[i];
  return diff == 0;
}

bool authorized(const HttpRequest& request, const RouteOptions& options) {
  return options.api_key.empty() || same_secret(request.authorization, "Bearer " + options.api_key);
}

// application/json, in any case, with or without parameters such as charset.
bool is_json(std::string_view content_type) {
  const std::string_view media = content_type.substr(0, content_type.find(';'));
  std::string lowered;
  for (const char c : media) {
    if (c != ' ' && c != '\t') lowered += char(std::tolower(static_cast<unsigned char>(c)));
  }
  return lowered == "application/json";
}

}  // namespace

std::string_view route_label(std::string_view path) {
  const RouteSpec* spec = find_route(path);
  return spec != nullptr ? spec->path : "other";
}

RoutedRequest route_request(const HttpRequest& request, const RouteOptions& options) {
  const std::string path = request.path();
  const RouteSpec* spec = find_route(path);
  if (spec == nullptr) {
    std::vector<std::string_view> paths;
    for (const RouteSpec& s : kRoutes) paths.push_back(s.path);
    throw ApiError(404, fmt::format("no such route; the server answers {}", fmt::join(paths, ", ")),
                   "invalid_request_error", "", "not_found");
  }
  if (request.method != spec->method) {
    throw ApiError(405, fmt::format("{} takes {} only", spec->path, spec->method),
                   "invalid_request_error", "", "method_not_allowed")
        .with_header("Allow", std::string(spec->method));
  }
  // Probes carry no key: a kubelet asks /health and /ready as they are.
  const bool open = spec->route == Route::kHealth || spec->route == Route::kReady ||
                    (spec->route == Route::kMetrics && options.open_metrics);
  if (!open && !authorized(request, options)) {
    throw ApiError(401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
                   "invalid_request_error", "", "invalid_api_key");
  }
  RoutedRequest routed{spec->route, std::nullopt, std::nullopt};
  const bool adapter_route =
      spec->route == Route::kLoadAdapter || spec->route == Route::kUnloadAdapter;
  if (adapter_route && options.lora_dir.empty()) {
    throw ApiError(404,
                   "adapters are not loaded or unloaded while this server runs; start it with "
                   "--lora-dir DIR to load them from DIR",
                   "invalid_request_error", "", "not_found");
  }
  if (spec->route == Route::kModels || spec->route == Route::kHealth ||
      spec->route == Route::kReady || spec->route == Route::kMetrics) {
    return routed;
  }
  if (!is_json(request.content_type)) {
    throw ApiError(415, "the request body must be JSON, sent with 'Content-Type: application/json'",
                   "invalid_request_error", "", "unsupported_media_type");
  }
  if (adapter_route) {
    routed.adapter_change = parse_adapter_change(request.body, spec->route == Route::kLoadAdapter);
    return routed;
  }
  const Endpoint endpoint = spec->route == Route::kCompletions ? Endpoint::kCompletions
                            : spec->route == Route::kTokenize  ? Endpoint::kTokenize
                                                               : Endpoint::kChatCompletions;
  routed.api = parse_request(endpoint, request.body, options.limits);
  return routed;
}

}  // namespace tessera::serve
