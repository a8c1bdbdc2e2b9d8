#include "tessera/serve/tool_calls.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "tessera/grammar/json_matcher.h"
#include "tessera/serve/openai_api.h"
#include "tessera/serve/response_builder.h"

namespace tessera::serve {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

const char* kTwoTools = R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
  "tools": [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {"city": {"$ref": "#/$defs/city"}},
      "required": ["city"], "$defs": {"city": {"type": "string", "maxLength": 8}}}}},
    {"type": "function", "function": {"name": "add", "parameters": {
      "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "required": ["a", "b"]}}}]})";

ToolUse tools_of(const std::string& body, const json& choice = json()) {
  json j = json::parse(body);
  ordered_json o = ordered_json::parse(body);
  if (!choice.is_null()) {
    j["tool_choice"] = choice;
    o["tool_choice"] = ordered_json::parse(choice.dump());
  }
  return parse_tools(j, o);
}

TEST(ToolCalls, ChoicesAndTheGrammarACallIsHeldTo) {
  EXPECT_EQ(tools_of(kTwoTools).choice, ToolChoice::kAuto);
  EXPECT_EQ(tools_of(kTwoTools, "none").choice, ToolChoice::kNone);
  EXPECT_FALSE(tools_of(kTwoTools, "auto").call_grammar);

  const ToolUse required = tools_of(kTwoTools, "required");
  ASSERT_TRUE(required.call_grammar);
  EXPECT_EQ(required.names, (std::vector<std::string>{"get_weather", "add"}));
  const grammar::JsonGrammar& any = *required.call_grammar;
  EXPECT_TRUE(grammar::matches(any, R"({"name":"get_weather","arguments":{"city":"Oslo"}})"));
  EXPECT_TRUE(grammar::matches(any, R"({"name":"add","arguments":{"a":1,"b":-2}})"));
  EXPECT_FALSE(grammar::matches(any, R"({"name":"add","arguments":{"city":"Oslo"}})"));
  EXPECT_FALSE(grammar::matches(any, R"({"name":"sub","arguments":{"a":1,"b":2}})"));
  EXPECT_FALSE(
      grammar::matches(any, R"({"name":"get_weather","arguments":{"city":"Llanfairpwll"}})"));

  const ToolUse named =
      tools_of(kTwoTools, {{"type", "function"}, {"function", {{"name", "add"}}}});
  EXPECT_EQ(named.choice, ToolChoice::kNamed);
  EXPECT_TRUE(grammar::matches(*named.call_grammar, R"({"name":"add","arguments":{"a":1,"b":2}})"));
  EXPECT_FALSE(grammar::matches(*named.call_grammar,
                                R"({"name":"get_weather","arguments":{"city":"Oslo"}})"));
  EXPECT_NE(named.call_key, required.call_key);

  EXPECT_THROW(tools_of(kTwoTools, "sometimes"), ParamError);
  EXPECT_THROW(tools_of(R"({"tools": [{"type": "function", "function": {"name": "a"}},
                                      {"type": "function", "function": {"name": "a"}}]})"),
               ParamError);
  EXPECT_THROW(tools_of(R"({"tools": {"name": "a"}})"), ParamError);
}

TEST(ToolCalls, FoundInTheShapesModelsWriteThem) {
  const std::vector<std::string> names = {"get_weather", "add"};
  const auto found = tool_calls_in(R"( {"name": "add", "arguments": {"a": 1, "b": 2}} )", names);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->content, "");
  ASSERT_EQ(found->calls.size(), 1u);
  EXPECT_EQ(found->calls[0]["type"], "function");
  EXPECT_EQ(found->calls[0]["id"].get<std::string>().substr(0, 5), "call_");
  EXPECT_EQ(found->calls[0]["function"]["name"], "add");
  EXPECT_EQ(json::parse(found->calls[0]["function"]["arguments"].get<std::string>()),
            json({{"a", 1}, {"b", 2}}));

  // Llama 3.1 writes "parameters"; an array is parallel calls.
  const auto llama = tool_calls_in(
      R"([{"name": "get_weather", "parameters": {"city": "Oslo"}}, {"name": "add"}])", names);
  ASSERT_TRUE(llama);
  ASSERT_EQ(llama->calls.size(), 2u);
  EXPECT_EQ(llama->calls[1]["function"]["arguments"], "{}");
  EXPECT_NE(llama->calls[0]["id"], llama->calls[1]["id"]);

  // Hermes and Qwen 2.5 wrap each call; text before the first is the content.
  const auto hermes = tool_calls_in(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Oslo\"}}\n</tool_call>\n<tool_call>{\"name\": \"add\", \"arguments\": {}}</tool_call>",
      names);
  ASSERT_TRUE(hermes);
  EXPECT_EQ(hermes->content, "Let me check.");
  EXPECT_EQ(hermes->calls.size(), 2u);

  for (const char* not_calls :
       {"It is sunny.", R"({"name": "sub", "arguments": {}})", R"({"name": "add", "arguments": 3})",
        "<tool_call>{\"name\": \"add\"", "{\"name\": \"add\", \"argum", "[]", ""}) {
    EXPECT_FALSE(tool_calls_in(not_calls, names)) << not_calls;
  }
  for (const char* may : {"", "  ", " {\"na", "[", "<tool", "<tool_call>{"}) {
    EXPECT_TRUE(may_be_tool_call(may)) << may;
  }
  for (const char* not_call : {"Hello", " <b>", "<tool_cal!"}) {
    EXPECT_FALSE(may_be_tool_call(not_call)) << not_call;
  }
}

std::vector<GeneratedToken> tokens_of(const std::string& text) {
  std::vector<GeneratedToken> tokens;
  for (const char c : text) {
    GeneratedToken token;
    token.id = uint8_t(c);
    token.text = std::string(1, c);
    tokens.push_back(token);
  }
  return tokens;
}

TEST(ToolCalls, RepliesCarryThemWholeAndStreamed) {
  auto tokenizer = tokenizer::load_tokenizer("byte");
  const std::string call = R"({"name": "add", "arguments": {"a": 1, "b": 2}})";
  const std::vector<std::string> names = {"add"};

  ResponseBuilder whole(Endpoint::kChatCompletions, "tiny", *tokenizer, false, names);
  const json reply = whole.response(tokens_of(call), FinishReason::kStop, {5, 9});
  const json& choice = reply["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "add");

  // Streamed: held back while it may be a call, then the call in one delta.
  ResponseBuilder streamed(Endpoint::kChatCompletions, "tiny", *tokenizer, false, names);
  EXPECT_FALSE(streamed.chunk(tokens_of(call.substr(0, 10))));
  EXPECT_FALSE(streamed.chunk(tokens_of(call.substr(10))));
  const std::vector<json> last = streamed.final_chunks(FinishReason::kStop);
  ASSERT_EQ(last.size(), 2u);
  const json& delta = last[0]["choices"][0]["delta"];
  EXPECT_EQ(delta["role"], "assistant");
  EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
  EXPECT_EQ(json::parse(delta["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            json({{"a", 1}, {"b", 2}}));
  EXPECT_EQ(last[1]["choices"][0]["finish_reason"], "tool_calls");

  // Text that cannot be a call streams as it comes, the held part first.
  ResponseBuilder text(Endpoint::kChatCompletions, "tiny", *tokenizer, false, names);
  EXPECT_FALSE(text.chunk(tokens_of(" ")));
  const auto first = text.chunk(tokens_of("Hi"));
  ASSERT_TRUE(first);
  EXPECT_EQ((*first)["choices"][0]["delta"]["content"], " Hi");
  EXPECT_EQ((*text.chunk(tokens_of("!")))["choices"][0]["delta"]["content"], "!");
  EXPECT_EQ(text.final_chunks(FinishReason::kLength).back()["choices"][0]["finish_reason"],
            "length");
  // Text that looked like a call and was not one arrives at the end as content.
  ResponseBuilder broken(Endpoint::kChatCompletions, "tiny", *tokenizer, false, names);
  EXPECT_FALSE(broken.chunk(tokens_of("{\"na")));
  const std::vector<json> end = broken.final_chunks(FinishReason::kLength);
  EXPECT_EQ(end[0]["choices"][0]["delta"]["content"], "{\"na");
  EXPECT_EQ(end[1]["choices"][0]["finish_reason"], "length");
}

// A chat template that takes tools (Qwen 2.5's) sees the request's tools, and a conversation's
// earlier calls and results.
TEST(ToolCalls, TheChatTemplateRendersTheTools) {
  std::ifstream file(std::string(TESSERA_SOURCE_DIR) +
                     "/tests/serve/chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  std::stringstream source;
  source << file.rdbuf();
  const jinja::ChatTemplate qwen(source.str(), "", "<|im_end|>");
  auto tokenizer = tokenizer::load_tokenizer("byte");
  ApiRequest request = parse_request(Endpoint::kChatCompletions, R"({"model": "tiny",
    "messages": [{"role": "user", "content": "2+3?"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "add", "arguments": "{\"a\": 2, \"b\": 3}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "5"}],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds two numbers",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]})",
                                     {"tiny", 4096, 100});
  const std::vector<int32_t> ids = prompt_tokens(request, *tokenizer, &qwen);
  const std::string prompt = tokenizer->decode(ids);
  EXPECT_NE(prompt.find("<tools>"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find("Adds two numbers"), std::string::npos) << prompt;
  EXPECT_NE(prompt.find(R"(<tool_call>
{"name": "add", "arguments": {"a": 2, "b": 3}})"),
            std::string::npos)
      << prompt;
  EXPECT_NE(prompt.find("<tool_response>\n5\n</tool_response>"), std::string::npos) << prompt;
}

}  // namespace
}  // namespace tessera::serve
