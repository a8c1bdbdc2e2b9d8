// The server's routes, described once: their paths, methods and whether they need the API key.
// Routing, the 405 answer's Allow header and the route label of the HTTP metrics all read this
// table.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/serve/adapter_admin.h"
#include "tessera/serve/http_message.h"
#include "tessera/serve/openai_api.h"

namespace tessera::serve {

enum class Route {
  kCompletions,
  kChatCompletions,
  kTokenize,
  kModels,
  kLoadAdapter,
  kUnloadAdapter,
  kHealth,
  kReady,
  kMetrics
};

struct RouteSpec {
  std::string_view path, method;
  Route route;
};

inline constexpr RouteSpec kRoutes[] = {
    {"/v1/completions", "POST", Route::kCompletions},
    {"/v1/chat/completions", "POST", Route::kChatCompletions},
    {"/tokenize", "POST", Route::kTokenize},
    {"/v1/models", "GET", Route::kModels},
    {"/v1/load_lora_adapter", "POST", Route::kLoadAdapter},
    {"/v1/unload_lora_adapter", "POST", Route::kUnloadAdapter},
    {"/health", "GET", Route::kHealth},
    {"/ready", "GET", Route::kReady},
    {"/metrics", "GET", Route::kMetrics},
};

// Who may call what, and what a generation request may ask.
struct RouteOptions {
  std::string api_key;       // empty: no authentication
  bool open_metrics = true;  // /metrics without the key, so a scraper needs none (as vLLM)
  ApiLimits limits;
  // The folder LoRA adapters may be loaded from while serving; empty: the adapter routes are
  // refused.
  std::filesystem::path lora_dir;
};

// A request matched to its route and, for the generation, tokenize and adapter routes, its
// checked body.
struct RoutedRequest {
  Route route;
  std::optional<ApiRequest> api;
  std::optional<AdapterChange> adapter_change;
};

// Matches, authenticates and checks a request. Throws ApiError: 404 for an unknown path, 405
// (with Allow) for a wrong method, 401 for a missing or wrong key (every route but /health,
// /ready and, unless protected, /metrics), 404 for the adapter routes without lora_dir, 415 for
// a body that is not application/json, and the 400s and 404s of its parser.
RoutedRequest route_request(const HttpRequest& request, const RouteOptions& options);

// The route label of a path for metrics: the route's path, or "other", so series stay few.
std::string_view route_label(std::string_view path);

}  // namespace tessera::serve
