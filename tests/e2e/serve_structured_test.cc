// Structured outputs over real HTTP: replies held to a JSON schema or to any JSON object, whole
// and streamed, and required tool calls, checked by a validator of the test's own; schemas the
// server cannot follow are refused naming the keyword.
#include <httplib.h>

#include <future>
#include <set>

#include "tests/e2e/server_process.h"

namespace tessera::testing {
namespace {

using nlohmann::json;

class ServeStructured : public ServedCheckpointTest {};

int64_t code_points(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (uint8_t(c) & 0xC0) != 0x80; });
}

// Why `value` does not satisfy `schema` (empty when it does), for the keywords the tests use.
std::string violation(const json& value, const json& schema, const std::string& at = "$") {
  if (schema.contains("enum")) {
    for (const json& option : schema["enum"]) {
      if (option == value) return "";
    }
    return at + " is not one of the enum";
  }
  const std::string type = schema.value("type", "");
  if (type == "object") {
    if (!value.is_object()) return at + " is not an object";
    for (const json& name : schema.value("required", json::array())) {
      if (!value.contains(name.get<std::string>())) return at + " lacks " + name.dump();
    }
    for (const auto& [key, v] : value.items()) {
      if (!schema["properties"].contains(key)) return at + " has the extra key " + key;
      const std::string why = violation(v, schema["properties"][key], at + "." + key);
      if (!why.empty()) return why;
    }
    return "";
  }
  if (type == "array") {
    if (!value.is_array()) return at + " is not an array";
    if (int64_t(value.size()) > schema.value("maxItems", int64_t(1) << 40)) return at + " too long";
    if (int64_t(value.size()) < schema.value("minItems", 0)) return at + " too short";
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string why =
          violation(value[i], schema["items"], at + "[" + std::to_string(i) + "]");
      if (!why.empty()) return why;
    }
    return "";
  }
  if (type == "string") {
    if (!value.is_string()) return at + " is not a string";
    const int64_t n = code_points(value.get<std::string>());
    if (n > schema.value("maxLength", int64_t(1) << 40) || n < schema.value("minLength", 0)) {
      return at + " has the wrong length";
    }
    return "";
  }
  if (type == "integer") return value.is_number_integer() ? "" : at + " is not an integer";
  if (type == "number") return value.is_number() ? "" : at + " is not a number";
  if (type == "boolean") return value.is_boolean() ? "" : at + " is not a boolean";
  return at + " has a type the validator does not know";
}

const json kOrderSchema = json::parse(R"({
  "type": "object",
  "properties": {
    "customer": {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 12},
        "tier": {"enum": ["gold", "silver", "none"]}},
      "required": ["name", "tier"], "additionalProperties": false},
    "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
        "type": "object", "properties": {
          "sku": {"type": "string", "maxLength": 6},
          "count": {"type": "integer"},
          "price": {"type": "number"}},
        "required": ["sku", "count", "price"], "additionalProperties": false}},
    "gift": {"type": "boolean"},
    "note": {"type": "string", "maxLength": 10}
  },
  "required": ["customer", "items", "gift"],
  "additionalProperties": false
})");

json order_request(uint64_t seed, bool stream) {
  return {{"model", "tiny"},
          {"messages", {{{"role", "user"}, {"content", "An order, as JSON."}}}},
          {"max_tokens", 600},
          {"temperature", 1.0},
          {"seed", seed},
          {"stream", stream},
          {"response_format",
           {{"type", "json_schema"},
            {"json_schema", {{"name", "order"}, {"strict", true}, {"schema", kOrderSchema}}}}}};
}

// The content of a streamed chat reply's deltas, joined, and its finish reason.
std::pair<std::string, std::string> streamed_content(const std::string& events) {
  std::string content, reason;
  std::istringstream lines(events);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: {", 0) != 0) continue;
    const json chunk = json::parse(line.substr(6));
    for (const json& choice : chunk["choices"]) {
      if (choice["delta"].contains("content"))
        content += choice["delta"]["content"].get<std::string>();
      if (choice["finish_reason"].is_string()) reason = choice["finish_reason"];
    }
  }
  return {content, reason};
}

// 200 sampled replies, four at a time, whole and streamed: every one is JSON the schema accepts.
TEST_F(ServeStructured, EveryReplyHeldToASchemaIsValid) {
  ServerProcess server(serve_args("--max-running 4"));
  std::vector<std::future<std::string>> failures;
  for (int worker = 0; worker < 4; ++worker) {
    failures.push_back(std::async(std::launch::async, [&, worker] {
      httplib::Client client("127.0.0.1", server.port());
      client.set_read_timeout(60);
      for (int i = worker; i < 200; i += 4) {
        const bool stream = i % 5 == 0;
        auto r = client.Post("/v1/chat/completions", order_request(uint64_t(i), stream).dump(),
                             "application/json");
        if (!r || r->status != 200) return "request " + std::to_string(i) + " failed";
        std::string content, reason;
        if (stream) {
          std::tie(content, reason) = streamed_content(r->body);
        } else {
          const json reply = json::parse(r->body);
          content = reply["choices"][0]["message"]["content"];
          reason = reply["choices"][0]["finish_reason"];
        }
        if (reason != "stop") return "request " + std::to_string(i) + " ended " + reason;
        json value;
        try {
          value = json::parse(content);
        } catch (const json::exception& e) {
          return "request " + std::to_string(i) + " is not JSON: " + content;
        }
        const std::string why = violation(value, kOrderSchema);
        if (!why.empty()) return "request " + std::to_string(i) + ": " + why + " in " + content;
        if (i < 2) std::printf("reply %d: %s\n", i, content.c_str());
      }
      return std::string();
    }));
  }
  for (auto& f : failures) EXPECT_EQ(f.get(), "");
}

TEST_F(ServeStructured, JsonObjectRepliesAreObjects) {
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  int complete = 0;
  for (int seed = 0; seed < 10; ++seed) {
    const json body = {{"model", "tiny"},
                       {"prompt", "{"},
                       {"max_tokens", 300},
                       {"seed", seed},
                       {"response_format", {{"type", "json_object"}}}};
    auto r = client.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json reply = json::parse(r->body);
    const std::string text = reply["choices"][0]["text"];
    ASSERT_EQ(text.substr(0, 1), "{") << text;
    // A reply cut by max_tokens is a prefix of an object; one that stopped is a whole one.
    if (reply["choices"][0]["finish_reason"] == "stop") {
      ++complete;
      EXPECT_TRUE(json::parse(text).is_object()) << text;
    }
  }
  std::printf("%d of 10 json_object replies closed within 300 tokens\n", complete);
}

// tool_choice "required" over two tools: every reply calls one of them with arguments its
// parameters accept; with "auto" a reply that is not a call is plain content.
TEST_F(ServeStructured, RequiredToolCallsFollowTheirFunctionsParameters) {
  const json add = {{"type", "object"},
                    {"properties", {{"a", {{"type", "integer"}}}, {"b", {{"type", "integer"}}}}},
                    {"required", {"a", "b"}}};
  const json find = {
      {"type", "object"},
      {"properties",
       {{"words",
         {{"type", "array"}, {"maxItems", 3}, {"items", {{"type", "string"}, {"maxLength", 6}}}}},
        {"exact", {{"type", "boolean"}}}}},
      {"required", {"words", "exact"}}};
  const json tools = {
      {{"type", "function"}, {"function", {{"name", "add"}, {"parameters", add}}}},
      {{"type", "function"}, {"function", {{"name", "find"}, {"parameters", find}}}}};
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  std::set<std::string> called;
  for (int seed = 0; seed < 20; ++seed) {
    const json body = {
        {"model", "tiny"},   {"messages", {{{"role", "user"}, {"content", "Use a tool."}}}},
        {"tools", tools},    {"tool_choice", "required"},
        {"max_tokens", 400}, {"seed", seed}};
    auto r = client.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json choice = json::parse(r->body)["choices"][0];
    ASSERT_EQ(choice["finish_reason"], "tool_calls") << r->body;
    const json call = choice["message"]["tool_calls"][0]["function"];
    const std::string name = call["name"];
    called.insert(name);
    const json arguments = json::parse(call["arguments"].get<std::string>());
    EXPECT_EQ(violation(arguments, name == "add" ? add : find), "") << r->body;
  }
  EXPECT_EQ(called.size(), 2u) << "twenty seeds called only one of the two tools";

  const json body = {{"model", "tiny"},
                     {"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                     {"tools", tools},
                     {"max_tokens", 8},
                     {"temperature", 0}};
  auto r = client.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  const json message = json::parse(r->body)["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_string()) << r->body;
  EXPECT_FALSE(message.contains("tool_calls")) << r->body;
}

TEST_F(ServeStructured, SchemasItCannotFollowAreRefusedNamingTheKeyword) {
  ServerProcess server(serve_args());
  httplib::Client client("127.0.0.1", server.port());
  for (const auto& [format, named] : std::vector<std::pair<json, std::string>>{
           {{{"type", "json_schema"},
             {"json_schema",
              {{"name", "x"},
               {"schema",
                {{"type", "object"},
                 {"properties", {{"a", {{"type", "string"}, {"pattern", "^a+$"}}}}}}}}}},
            "'pattern' is not supported"},
           {{{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}},
            "must be an object with a 'schema'"},
           {{{"type", "xml"}}, "'response_format' must be"},
       }) {
    const json body = {{"model", "tiny"}, {"prompt", "x"}, {"response_format", format}};
    auto r = client.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const json error = json::parse(r->body)["error"];
    EXPECT_EQ(error["param"], "response_format") << r->body;
    EXPECT_NE(error["message"].get<std::string>().find(named), std::string::npos) << r->body;
  }
}

}  // namespace
}  // namespace tessera::testing
