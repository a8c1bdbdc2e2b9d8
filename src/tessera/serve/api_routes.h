// The server's routes, described once: their paths, methods and whether they need the API key.
// Routing, the 405 answer's Allow header and the route label of the HTTP metrics all read this
// table.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tessera/serve/http_message.h"
#include "tessera/serve/openai_api.h"

namespace tessera::serve {

enum class Route { kCompletions, kChatCompletions, kTokenize, kModels, kHealth, kReady, kMetrics };

struct RouteSpec {
  std::string_view path, method;
  Route route;
};

inline constexpr RouteSpec kRoutes[] = {
    {"/v1/completions", "POST", Route::kCompletions},
    {"/v1/chat/completions", "POST", Route::kChatCompletions},
    {"/tokenize", "POST", Route::kTokenize},
    {"/v1/models", "GET", Route::kModels},
    {"/health", "GET", Route::kHealth},
    {"/ready", "GET", Route::kReady},
    {"/metrics", "GET", Route::kMetrics},
};

// Who may call what, and what a generation request may ask.
struct RouteOptions {
  std::string api_key;       // empty: no authentication
  bool open_metrics = true;  // /metrics without the key, so a scraper needs none (as vLLM)
  ApiLimits limits;
};

// A request matched to its route and, for the generation and tokenize routes, its checked body.
struct RoutedRequest {
  Route route;
  std::optional<ApiRequest> api;
};

// Matches, authenticates and checks a request. Throws ApiError: 404 for an unknown path, 405
// (with Allow) for a wrong method, 401 for a missing or wrong key (every route but /health,
// /ready and, unless protected, /metrics), 415 for a generation body that
// is not application/json, and parse_request's 400s and 404 for the body.
RoutedRequest route_request(const HttpRequest& request, const RouteOptions& options);

// The route label of a path for metrics: the route's path, or "other", so series stay few.
std::string_view route_label(std::string_view path);

}  // namespace tessera::serve
