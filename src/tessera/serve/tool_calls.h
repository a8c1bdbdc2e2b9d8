// Tool calls in OpenAI's shape: a request's tools and tool_choice checked, the grammar a reply
// that must call a tool is held to, and the calls found in a reply's text.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/grammar/json_schema.h"
#include "tessera/serve/param_error.h"

namespace tessera::serve {

// none: tools are shown to the model but never called; auto: the reply may call them (found by
// tool_calls_in); required: the reply is one call of any tool; named: one call of that tool.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ToolUse {
  nlohmann::ordered_json tools;  // the request's tools, as the chat template takes them
  ToolChoice choice = ToolChoice::kNone;
  std::vector<std::string> names;  // of the functions
  // required and named: the grammar the reply is held to, a JSON object
  // {"name": ..., "arguments": {...}} with the function's parameters as the schema of its
  // arguments; call_key names it as ApiRequest::response_key does.
  std::shared_ptr<const grammar::JsonGrammar> call_grammar;
  std::string call_key;

  bool calls() const { return choice != ToolChoice::kNone; }
};

// Checks tools ([{"type": "function", "function": {"name", "description", "parameters"}}]) and
// tool_choice ("none", "auto" (the default with tools), "required", or
// {"type": "function", "function": {"name"}}) from the body, whose ordered form keeps each
// schema's property order. Throws a ParamError naming the parameter at fault.
ToolUse parse_tools(const nlohmann::json& body, const nlohmann::ordered_json& ordered_body);

// The calls a reply's text makes, in OpenAI's tool_calls form
// ([{"id", "type": "function", "function": {"name", "arguments": JSON text}}]), and the text
// before them; nullopt when it makes none. A call is a JSON object
// {"name": one of names, "arguments" (or Llama 3.1's "parameters"): {...}}: the whole text, an
// array of them, or each inside <tool_call>...</tool_call> (Hermes and Qwen 2.5 templates).
struct FoundCalls {
  std::string content;  // text before the first call, trimmed
  nlohmann::json calls;
};
std::optional<FoundCalls> tool_calls_in(const std::string& text,
                                        const std::vector<std::string>& names);

// Whether text so far may still turn out to be tool calls (empty, or starting with '{', '[' or
// "<tool_call>" after white space): a streamed reply holds such text back until it knows.
bool may_be_tool_call(const std::string& text);

// A conversation's assistant tool calls, arguments parsed from their JSON text, as chat
// templates expect them.
nlohmann::json calls_for_template(const nlohmann::json& tool_calls);

}  // namespace tessera::serve
