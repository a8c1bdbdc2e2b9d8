#include "tessera/serve/api_routes.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

namespace tessera::serve {
namespace {

RouteOptions options(bool open_metrics = true) {
  RouteOptions o;
  o.api_key = "secret";
  o.open_metrics = open_metrics;
  o.limits = {"tiny", 64, 48};
  return o;
}

HttpRequest request(std::string method, std::string target, std::string key = "Bearer secret") {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.authorization = std::move(key);
  r.content_type = "application/json";
  r.body = R"({"model": "tiny", "prompt": "hi"})";
  return r;
}

// The status a request draws, with the value of one header of the answer.
std::pair<int, std::string> status_of(const HttpRequest& r, const RouteOptions& o,
                                      const std::string& header = "") {
  try {
    route_request(r, o);
    return {200, ""};
  } catch (const ApiError& e) {
    for (const auto& [name, value] : e.headers()) {
      if (name == header) return {e.status(), value};
    }
    return {e.status(), ""};
  }
}

TEST(ApiRoutes, MatchesPathsAndMethods) {
  const RouteOptions o = options();
  EXPECT_EQ(route_request(request("POST", "/v1/completions"), o).route, Route::kCompletions);
  EXPECT_TRUE(route_request(request("POST", "/v1/completions?x=1"), o).api.has_value());
  EXPECT_EQ(route_request(request("GET", "/ready"), o).route, Route::kReady);
  EXPECT_EQ(status_of(request("GET", "/v2/nothing"), o), std::make_pair(404, std::string()));
  EXPECT_EQ(status_of(request("GET", "/v1/completions"), o, "Allow"),
            std::make_pair(405, std::string("POST")));
  EXPECT_EQ(status_of(request("DELETE", "/metrics"), o, "Allow"),
            std::make_pair(405, std::string("GET")));
}

TEST(ApiRoutes, TheKeyGuardsAllButTheProbesAndOpenMetrics) {
  const RouteOptions o = options();
  EXPECT_EQ(status_of(request("POST", "/v1/completions", ""), o).first, 401);
  EXPECT_EQ(status_of(request("POST", "/v1/completions", "Bearer secreT"), o).first, 401);
  EXPECT_EQ(status_of(request("GET", "/v1/models", "secret"), o).first, 401);
  EXPECT_EQ(status_of(request("GET", "/ready", ""), o).first, 200);
  EXPECT_EQ(status_of(request("GET", "/health", ""), o).first, 200);
  EXPECT_EQ(status_of(request("GET", "/metrics", ""), o).first, 200);
  EXPECT_EQ(status_of(request("GET", "/metrics", ""), options(false)).first, 401);
  RouteOptions no_key = options();
  no_key.api_key.clear();
  EXPECT_EQ(status_of(request("GET", "/v1/models", ""), no_key).first, 200);
}

TEST(ApiRoutes, GenerationBodiesMustBeJson) {
  const RouteOptions o = options();
  for (const char* type : {"text/plain", "", "application/x-www-form-urlencoded", "json"}) {
    HttpRequest r = request("POST", "/v1/chat/completions");
    r.content_type = type;
    EXPECT_EQ(status_of(r, o).first, 415) << type;
  }
  for (const char* type : {"application/json", "Application/JSON; charset=utf-8"}) {
    HttpRequest r = request("POST", "/v1/completions");
    r.content_type = type;
    EXPECT_EQ(status_of(r, o).first, 200) << type;
  }
}

// vLLM's runtime adapter routes answer only a server given a folder to load from, need the key,
// and check their bodies.
TEST(ApiRoutes, AdapterRoutesNeedTheFolderTheKeyAndTheirFields) {
  RouteOptions o = options();
  HttpRequest load = request("POST", "/v1/load_lora_adapter");
  load.body = R"({"lora_name": "a", "lora_path": "runs/a"})";
  EXPECT_EQ(status_of(load, o).first, 404);
  o.lora_dir = "/srv/adapters";
  const RoutedRequest routed = route_request(load, o);
  EXPECT_EQ(routed.route, Route::kLoadAdapter);
  ASSERT_TRUE(routed.adapter_change.has_value());
  EXPECT_EQ(routed.adapter_change->name, "a");
  EXPECT_EQ(routed.adapter_change->path, "runs/a");
  load.authorization.clear();
  EXPECT_EQ(status_of(load, o).first, 401);
  HttpRequest unload = request("POST", "/v1/unload_lora_adapter");
  unload.body = R"({"lora_name": "a"})";
  EXPECT_EQ(route_request(unload, o).adapter_change->name, "a");
  for (const char* body :
       {R"({"lora_name": "a"})", R"({"lora_name": "", "lora_path": "x"})",
        R"({"lora_name": 3, "lora_path": "x"})", R"([1])", R"({"lora_name": "a", "lora_path":)"}) {
    HttpRequest bad = request("POST", "/v1/load_lora_adapter");
    bad.body = body;
    EXPECT_EQ(status_of(bad, o).first, 400) << body;
  }
  HttpRequest long_name = unload;
  long_name.body = nlohmann::json{{"lora_name", std::string(129, 'x')}}.dump();
  EXPECT_EQ(status_of(long_name, o).first, 400);
}

// A client names adapters inside the server's adapter folder, never elsewhere.
TEST(ApiRoutes, AdapterPathsStayInsideTheFolder) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("tessera-adapter-dir-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "adapters" / "a");
  fs::create_directories(root / "secret");
  fs::create_directory_symlink(root / "secret", root / "adapters" / "link");
  const fs::path dir = root / "adapters";
  const auto status = [&](const std::string& path) {
    try {
      adapter_path_within(dir, path);
      return 200;
    } catch (const ApiError& e) {
      return e.status();
    }
  };
  EXPECT_EQ(adapter_path_within(dir, "a"), fs::canonical(dir / "a"));
  EXPECT_EQ(adapter_path_within(dir, (dir / "a").string()), fs::canonical(dir / "a"));
  EXPECT_EQ(status("./a/../a"), 200);
  EXPECT_EQ(status("../secret"), 403);
  EXPECT_EQ(status("a/../../secret"), 403);
  EXPECT_EQ(status((root / "secret").string()), 403);
  EXPECT_EQ(status("link"), 403) << "a link out of the folder";
  EXPECT_EQ(status("/"), 403);
  EXPECT_EQ(status("missing"), 404);
  fs::remove_all(root);
}

TEST(ApiRoutes, LabelsComeFromTheTable) {
  EXPECT_EQ(route_label("/v1/completions"), "/v1/completions");
  EXPECT_EQ(route_label("/v1/completions/../x"), "other");
  EXPECT_EQ(route_label("/anything"), "other");
}

}  // namespace
}  // namespace tessera::serve
