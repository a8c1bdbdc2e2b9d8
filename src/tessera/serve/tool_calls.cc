#include "tessera/serve/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

namespace tessera::serve {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr std::string_view kOpenCall = "<tool_call>", kCloseCall = "</tool_call>";

[[noreturn]] void refuse(const std::string& param, const std::string& message) {
  throw ParamError(param, message);
}

std::string trimmed(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return "";
  return std::string(s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1));
}

// OpenAI's rule for function names.
bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(uint8_t(c)) || c == '_' || c == '-';
  });
}

// The schema of one call of `name`: {"name": name, "arguments": its parameters}. The
// parameters' own definitions move to the root, where their references point.
ordered_json call_schema(const std::string& name, ordered_json parameters, ordered_json& defs) {
  for (const char* container : {"$defs", "definitions"}) {
    if (!parameters.is_object() || !parameters.contains(container)) continue;
    for (auto& [key, schema] : parameters[container].items()) {
      if (defs[container].contains(key)) {
        throw grammar::SchemaError(fmt::format("two tools define {} '{}'", container, key));
      }
      defs[container][key] = schema;
    }
    parameters.erase(container);
  }
  return {{"type", "object"},
          {"properties", {{"name", {{"const", name}}}, {"arguments", std::move(parameters)}}},
          {"required", {"name", "arguments"}},
          {"additionalProperties", false}};
}

std::string call_id() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  constexpr std::string_view kDigits =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kDigits[rng() % kDigits.size()];
  return id;
}

std::optional<json> call_from(const json& j, const std::vector<std::string>& names) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
  const std::string name = j["name"];
  if (std::find(names.begin(), names.end(), name) == names.end()) return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  const json arguments = j.value(key, json::object());
  if (!arguments.is_object()) return std::nullopt;
  return json{{"id", call_id()},
              {"type", "function"},
              {"function", {{"name", name}, {"arguments", arguments.dump()}}}};
}

}  // namespace

ToolUse parse_tools(const json& body, const ordered_json& ordered_body) {
  ToolUse use;
  const auto tools = body.find("tools");
  const auto choice = body.find("tool_choice");
  if (tools == body.end() || tools->is_null() || (tools->is_array() && tools->empty())) {
    if (choice != body.end() && !choice->is_null() && *choice != "none") {
      refuse("tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
    }
    return use;
  }
  if (!tools->is_array()) {
    refuse("tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
  }
  use.tools = ordered_body["tools"];
  std::vector<ordered_json> schemas;
  ordered_json defs = ordered_json::object();
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& tool = (*tools)[i];
    const std::string at = fmt::format("tools[{}]", i);
    if (!tool.is_object() || tool.value("type", json()) != "function" ||
        !tool.contains("function") || !tool["function"].is_object()) {
      refuse("tools",
             fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{...}}}}", at));
    }
    const json& function = tool["function"];
    const json named = function.value("name", json());
    if (!named.is_string() || !valid_name(named.get<std::string>())) {
      refuse("tools",
             fmt::format("'{}.function.name' must be 1 to 64 letters, digits, _ or -", at));
    }
    const std::string name = named.get<std::string>();
    if (std::find(use.names.begin(), use.names.end(), name) != use.names.end()) {
      refuse("tools", fmt::format("'{}' names the function '{}' a second time", at, name));
    }
    use.names.push_back(name);
    ordered_json parameters = use.tools[i]["function"].value("parameters", ordered_json());
    if (parameters.is_null()) parameters = {{"type", "object"}};
    if (!parameters.is_object()) {
      refuse("tools", fmt::format("'{}.function.parameters' must be a JSON schema object", at));
    }
    try {
      ordered_json own_defs = ordered_json::object();
      const ordered_json schema = call_schema(name, parameters, own_defs);
      ordered_json alone = schema;
      for (const auto& [container, entries] : own_defs.items()) alone[container] = entries;
      grammar::compile_json_schema(alone);  // each tool's parameters checked on their own
      schemas.push_back(call_schema(name, std::move(parameters), defs));
    } catch (const grammar::SchemaError& e) {
      refuse("tools", fmt::format("'{}.function.parameters': {}", at, e.what()));
    }
  }
  use.choice = ToolChoice::kAuto;
  if (choice != body.end() && !choice->is_null()) {
    if (*choice == "none") {
      use.choice = ToolChoice::kNone;
    } else if (*choice == "required") {
      use.choice = ToolChoice::kRequired;
    } else if (choice->is_object() && choice->value("type", json()) == "function" &&
               choice->contains("function") && (*choice)["function"].is_object() &&
               (*choice)["function"].value("name", json()).is_string()) {
      const std::string named = (*choice)["function"]["name"];
      const auto it = std::find(use.names.begin(), use.names.end(), named);
      if (it == use.names.end()) {
        refuse("tool_choice", fmt::format("'tool_choice' names the function '{}', which is not "
                                          "in 'tools'",
                                          named));
      }
      use.choice = ToolChoice::kNamed;
      schemas = {schemas[size_t(it - use.names.begin())]};
    } else if (*choice != "auto") {
      refuse("tool_choice",
             "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
             "\"function\": {\"name\": ...}}");
    }
  }
  if (use.choice == ToolChoice::kRequired || use.choice == ToolChoice::kNamed) {
    ordered_json schema = schemas.size() == 1 ? schemas[0] : ordered_json{{"anyOf", schemas}};
    for (const auto& [container, entries] : defs.items()) schema[container] = entries;
    try {
      use.call_grammar =
          std::make_shared<grammar::JsonGrammar>(grammar::compile_json_schema(schema));
    } catch (const grammar::SchemaError& e) {
      refuse("tools", e.what());
    }
    use.call_key = "tools " + schema.dump();
  }
  return use;
}

std::optional<FoundCalls> tool_calls_in(const std::string& text,
                                        const std::vector<std::string>& names) {
  FoundCalls found{.content = "", .calls = json::array()};
  const size_t first = text.find(kOpenCall);
  if (first != std::string::npos) {
    found.content = trimmed(std::string_view(text).substr(0, first));
    for (size_t at = first; at != std::string::npos; at = text.find(kOpenCall, at)) {
      at += kOpenCall.size();
      const size_t end = text.find(kCloseCall, at);
      const json call = json::parse(text.substr(at, end == std::string::npos ? end : end - at),
                                    nullptr, /*allow_exceptions=*/false);
      const std::optional<json> checked = call_from(call, names);
      if (!checked) return std::nullopt;
      found.calls.push_back(*checked);
      if (end == std::string::npos) break;
      at = end + kCloseCall.size();
    }
    return found;
  }
  const json whole = json::parse(trimmed(text), nullptr, /*allow_exceptions=*/false);
  for (const json& call : whole.is_array() ? whole : json::array({whole})) {
    const std::optional<json> checked = call_from(call, names);
    if (!checked) return std::nullopt;
    found.calls.push_back(*checked);
  }
  if (found.calls.empty()) return std::nullopt;
  return found;
}

bool may_be_tool_call(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return true;
  const std::string_view rest = std::string_view(text).substr(begin);
  if (rest[0] == '{' || rest[0] == '[') return true;
  return rest.size() < kOpenCall.size() ? kOpenCall.starts_with(rest) : rest.starts_with(kOpenCall);
}

json calls_for_template(const json& tool_calls) {
  json calls = json::array();
  for (json call : tool_calls) {
    json& arguments = call["function"]["arguments"];
    if (arguments.is_string()) {
      json parsed = json::parse(arguments.get<std::string>(), nullptr, false);
      if (parsed.is_object()) arguments = std::move(parsed);
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

}  // namespace tessera::serve
