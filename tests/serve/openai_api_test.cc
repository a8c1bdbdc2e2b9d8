#include "tessera/serve/openai_api.h"

#include <gtest/gtest.h>

#include "tessera/serve/response_builder.h"
#include "tessera/tokenizer/bpe_tokenizer.h"

namespace tessera::serve {
namespace {

using nlohmann::json;

const ApiLimits kLimits{"tiny", 64, 48};

// The error a body draws: status and param, or status 0 when it parses.
std::pair<int, std::string> error_of(Endpoint endpoint, const std::string& body) {
  try {
    parse_request(endpoint, body, kLimits);
  } catch (const ApiError& e) {
    const json b = e.body();
    EXPECT_TRUE(b["error"]["message"].is_string());
    EXPECT_TRUE(b["error"]["type"].is_string());
    EXPECT_TRUE(b["error"].contains("code"));
    return {e.status(),
            b["error"]["param"].is_null() ? "" : b["error"]["param"].get<std::string>()};
  }
  return {0, ""};
}

TEST(OpenAiApi, RefusesBadCompletionRequestsNamingTheParameter) {
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {"{not json", 400, ""},
      {"[1, 2]", 400, ""},
      {R"({"model": "tiny", "prompt": "hi", "max_tokens": 2e2222})", 400, ""},  // overflows
      {R"({"prompt": "hi"})", 400, "model"},
      {R"({"model": "gpt-4", "prompt": "hi"})", 404, "model"},
      {R"({"model": "tiny"})", 400, "prompt"},
      {R"({"model": "tiny", "prompt": ""})", 400, "prompt"},
      {R"({"model": "tiny", "prompt": 5})", 400, "prompt"},
      {R"({"model": "tiny", "prompt": "hi", "max_tokens": -1})", 400, "max_tokens"},
      {R"({"model": "tiny", "prompt": "hi", "max_tokens": 1000000})", 400, "max_tokens"},
      {R"({"model": "tiny", "prompt": "hi", "max_tokens": "5"})", 400, "max_tokens"},
      {R"({"model": "tiny", "prompt": "hi", "max_tokens": 2.5})", 400, "max_tokens"},
      {R"({"model": "tiny", "prompt": "hi", "temperature": -0.5})", 400, "temperature"},
      {R"({"model": "tiny", "prompt": "hi", "temperature": "hot"})", 400, "temperature"},
      {R"({"model": "tiny", "prompt": "hi", "top_p": 0})", 400, "top_p"},
      {R"({"model": "tiny", "prompt": "hi", "top_p": 1.5})", 400, "top_p"},
      {R"({"model": "tiny", "prompt": "hi", "min_p": 2})", 400, "min_p"},
      {R"({"model": "tiny", "prompt": "hi", "stop": ""})", 400, "stop"},
      {R"({"model": "tiny", "prompt": "hi", "stop": ["a","b","c","d","e"]})", 400, "stop"},
      {R"({"model": "tiny", "prompt": "hi", "stream": "yes"})", 400, "stream"},
      {R"({"model": "tiny", "prompt": "hi", "n": 2})", 400, "n"},
      {R"({"model": "tiny", "prompt": "hi", "logprobs": 9})", 400, "logprobs"},
      {R"({"model": "tiny", "prompt": "hi", "stream_options": {"include_usage": true}})", 400,
       "stream_options"},
  };
  for (const auto& [body, status, param] : cases) {
    EXPECT_EQ(error_of(Endpoint::kCompletions, body), std::make_pair(status, param)) << body;
  }
}

TEST(OpenAiApi, RefusesBadChatRequests) {
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {R"({"model": "tiny"})", 400, "messages"},
      {R"({"model": "tiny", "messages": []})", 400, "messages"},
      {R"({"model": "tiny", "messages": "hi"})", 400, "messages"},
      {R"({"model": "tiny", "messages": [{"role": "wizard", "content": "hi"}]})", 400,
       "messages[0].role"},
      {R"({"model": "tiny", "messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       400, "messages[0].content"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": [{"type": 1, "text": "a"}]}]})",
       400, "messages[0].content"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "top_logprobs": 3})",
       400, "top_logprobs"},
      // Formats and tool requests the server cannot follow are refused by name, never answered
      // as plain text.
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "response_format": {"type": "yaml"}})",
       400, "response_format"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})",
       400, "response_format"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "response_format": {"type": "json_schema", "json_schema": {"name": "x",
             "schema": {"type": "object", "properties": {"a": {"type": "string",
               "format": "email"}}}}}})",
       400, "response_format"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "f g"}}]})",
       400, "tools"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "f", "parameters":
             {"type": "object", "properties": {"n": {"type": "integer", "maximum": 3}}}}}]})",
       400, "tools"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "f"}}],
           "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       400, "tool_choice"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "tool_choice": "required"})",
       400, "tool_choice"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
           "response_format": {"type": "json_object"}})",
       400, "response_format"},
      {R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
           "functions": [{"name": "f"}]})",
       400, "functions"},
      {R"({"model": "tiny", "messages": [{"role": "tool", "content": "4"}]})", 400,
       "messages[0].tool_call_id"},
      {R"({"model": "tiny", "messages": [{"role": "assistant", "tool_calls": [{"id": "x"}]}]})",
       400, "messages[0].tool_calls"},
  };
  for (const auto& [body, status, param] : cases) {
    EXPECT_EQ(error_of(Endpoint::kChatCompletions, body), std::make_pair(status, param)) << body;
  }
  // What asks for plain text is plain text.
  EXPECT_EQ(error_of(Endpoint::kChatCompletions,
                     R"({"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                         "response_format": {"type": "text"}, "tools": [],
                         "tool_choice": "none"})")
                .first,
            0);
}

TEST(OpenAiApi, ReadsSamplingFieldsAndStops) {
  const ApiRequest r = parse_request(
      Endpoint::kCompletions,
      R"({"model": "tiny", "prompt": ["once"], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
          "top_k": 40, "min_p": 0.05, "seed": 42, "stop": "\n", "logprobs": 2, "stream": true,
          "stream_options": {"include_usage": true}})",
      kLimits);
  EXPECT_EQ(r.prompt, "once");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.generation.sampling.temperature, 0.5);
  EXPECT_EQ(r.generation.sampling.top_p, 0.9);
  EXPECT_EQ(r.generation.sampling.top_k, 40);
  EXPECT_EQ(r.generation.sampling.min_p, 0.05);
  EXPECT_EQ(r.generation.sampling.seed, 42u);
  EXPECT_EQ(r.generation.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(r.generation.top_logprobs, 2);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
}

TEST(OpenAiApi, ChatRendersTheDocumentedTemplateAndStopsAtTheNextTurn) {
  ApiRequest r = parse_request(Endpoint::kChatCompletions, R"({"model": "tiny", "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]},
      {"role": "assistant", "content": "Hello."},
      {"role": "user", "content": "Bye"}], "stop": ["END"]})",
                               kLimits);
  auto tokenizer = tokenizer::load_tokenizer("byte");
  EXPECT_EQ(tokenizer->decode(prompt_tokens(r, *tokenizer, nullptr)),
            "System: Be brief.\nUser: Hi!\nAssistant: Hello.\nUser: Bye\nAssistant:");
  const GenerationRequest g = to_generation(
      parse_request(Endpoint::kChatCompletions,
                    R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
                        "stop": ["END"]})",
                    kLimits),
      *tokenizer, kLimits);
  EXPECT_EQ(g.stop, (std::vector<std::string>{"END", "\nUser:", "\nSystem:"}));
}

TEST(OpenAiApi, ChatFollowsTheModelsTemplateWithItsSpecialTokens) {
  tokenizer::BpeVocab vocab = tokenizer::read_bpe_vocab("byte");
  vocab.special_tokens = {{"<|im_start|>", 256}, {"<|im_end|>", 257}};
  const tokenizer::BpeTokenizer tokenizer(std::move(vocab), "hf-bpe", "test");
  const jinja::ChatTemplate chatml(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "", "<|im_end|>");
  const std::string body = R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]})";
  const GenerationRequest g = to_generation(
      parse_request(Endpoint::kChatCompletions, body, kLimits), tokenizer, kLimits, &chatml);
  std::vector<int32_t> expected = {256};
  for (char c : std::string("user\nHi")) expected.push_back(uint8_t(c));
  expected.insert(expected.end(), {257, '\n', 256});
  for (char c : std::string("assistant\n")) expected.push_back(uint8_t(c));
  EXPECT_EQ(g.prompt, expected);
  EXPECT_TRUE(g.stop.empty());  // the template's turns end at its eos token, not at "User:"

  // /tokenize: the same tokens, or without the generation prompt when asked.
  ApiRequest tokenize = parse_request(
      Endpoint::kTokenize,
      R"({"model": "tiny", "add_generation_prompt": false, "messages": [{"role": "user", "content": "Hi"}]})",
      kLimits);
  const std::vector<int32_t> without = prompt_tokens(tokenize, tokenizer, &chatml);
  EXPECT_EQ(without, std::vector<int32_t>(expected.begin(), expected.end() - 11));

  // A template's raise_exception() is the client's 400, with its message.
  const jinja::ChatTemplate strict(
      "{% if messages[0].role != 'system' %}{{ raise_exception('a system message comes first') }}"
      "{% endif %}",
      "", "");
  try {
    to_generation(parse_request(Endpoint::kChatCompletions, body, kLimits), tokenizer, kLimits,
                  &strict);
    ADD_FAILURE() << "the template's exception was not raised";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("a system message comes first"), std::string::npos)
        << e.what();
  }
}

TEST(OpenAiApi, FitsMaxTokensToTheContext) {
  auto tokenizer = tokenizer::load_tokenizer("byte");
  auto generation = [&](const std::string& body) {
    return to_generation(parse_request(Endpoint::kCompletions, body, kLimits), *tokenizer, kLimits);
  };
  EXPECT_EQ(generation(R"({"model": "tiny", "prompt": "abc"})").max_tokens, 16);
  EXPECT_EQ(generation(R"({"model": "tiny", "prompt": [97, 98]})").prompt,
            (std::vector<int32_t>{97, 98}));
  const std::string sixty(60, 'a');
  EXPECT_EQ(generation(R"({"model": "tiny", "prompt": ")" + sixty + R"("})").max_tokens, 4);
  auto code_of = [&](const std::string& body) {
    try {
      generation(body);
    } catch (const ApiError& e) {
      const json code = e.body()["error"]["code"];
      return code.is_null() ? std::string("null") : code.get<std::string>();
    }
    return std::string("none");
  };
  EXPECT_EQ(code_of(R"({"model": "tiny", "prompt": ")" + std::string(64, 'a') + R"("})"),
            "context_length_exceeded");
  EXPECT_EQ(code_of(R"({"model": "tiny", "prompt": ")" + sixty + R"(", "max_tokens": 5})"),
            "context_length_exceeded");
  EXPECT_EQ(code_of(R"({"model": "tiny", "prompt": [300]})"), "null");  // outside the vocabulary
}

TEST(OpenAiApi, BuildsResponsesAndStreamChunksInOpenAisShape) {
  auto tokenizer = tokenizer::load_tokenizer("byte");
  std::vector<GeneratedToken> tokens(2);
  tokens[0].id = 'h';
  tokens[0].text = "h";
  tokens[1].id = 'i';
  tokens[1].text = "i";
  ResponseBuilder chat(Endpoint::kChatCompletions, "tiny", *tokenizer, false);
  const json whole = chat.response(tokens, FinishReason::kLength, {3, 2});
  EXPECT_EQ(whole["object"], "chat.completion");
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "hi");
  EXPECT_EQ(whole["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"],
            json({{"prompt_tokens", 3}, {"completion_tokens", 2}, {"total_tokens", 5}}));
  const json first = *chat.chunk(tokens);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_FALSE((*chat.chunk(tokens))["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(chat.final_chunks(FinishReason::kStop).back()["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(chat.usage_chunk({3, 2})["choices"].empty());
  // Speculative decoding's drafts are counted as OpenAI counts predicted outputs.
  EXPECT_EQ(chat.usage_chunk({3, 9, 6, 2})["usage"],
            json({{"prompt_tokens", 3},
                  {"completion_tokens", 9},
                  {"total_tokens", 12},
                  {"completion_tokens_details",
                   {{"accepted_prediction_tokens", 6}, {"rejected_prediction_tokens", 2}}}}));

  tokens[0].logprobs.chosen = {'h', -0.5};
  tokens[0].logprobs.top.push_back({'h', -0.5});
  tokens[1].logprobs.chosen = {'i', -1.5};
  ResponseBuilder completion(Endpoint::kCompletions, "tiny", *tokenizer, true);
  const json lp =
      completion.response(tokens, FinishReason::kStop, {1, 2})["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"h", "i"}));
  EXPECT_EQ(lp["token_logprobs"], json({-0.5, -1.5}));
  EXPECT_EQ(lp["top_logprobs"][0], json({{"h", -0.5}}));
  EXPECT_EQ(lp["text_offset"], json({0, 1}));
}

// A hostile body: deep nesting in each field is refused before parsing, and no error message
// grows with the value it names.
TEST(OpenAiApi, DeepNestingAndHugeValuesGetShortErrors) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string deep_object = [] {
    std::string s;
    for (int i = 0; i < 50000; ++i) s += "{\"a\":";
    return s + "1" + std::string(50000, '}');
  }();
  const std::string huge(200000, 'x');
  auto expect_short_error = [](const std::string& field, const std::string& value) {
    const std::string body = std::string(R"({"model": "tiny", "prompt": "hi", "messages": [], ")") +
                             field + "\": " + value + "}";
    for (const Endpoint endpoint : {Endpoint::kCompletions, Endpoint::kChatCompletions}) {
      try {
        parse_request(endpoint, body, kLimits);
        ADD_FAILURE() << "accepted " << field << " = " << value.substr(0, 20);
      } catch (const ApiError& e) {
        EXPECT_LT(std::string(e.what()).size(), 400u) << field << ": " << e.what();
        EXPECT_GE(e.status(), 400);
        EXPECT_LT(e.status(), 500);
      }
    }
  };
  for (const char* field : {"model", "prompt", "messages", "max_tokens", "temperature", "stop",
                            "stream", "stream_options", "seed", "logit_bias", "anything"}) {
    expect_short_error(field, deep);
    expect_short_error(field, deep_object);
  }
  for (const char* field : {"model", "max_tokens", "temperature", "top_p", "stream", "seed"}) {
    for (const std::string& value :
         {"\"" + huge + "\"", "[\"" + huge + "\"]", "{\"" + huge + "\": 1}"}) {
      expect_short_error(field, value);
    }
  }
  expect_short_error("model", "{\"a\": " + std::string(30, '[') + std::string(30, ']') + "}");
  // A body cut inside a long string: the parser's message quotes its last token.
  try {
    parse_request(Endpoint::kCompletions, R"({"model": "tiny", "prompt": ")" + huge, kLimits);
    ADD_FAILURE() << "a cut body was accepted";
  } catch (const ApiError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
  }
  try {
    parse_request(Endpoint::kCompletions, R"({"model": "tiny", "prompt": )" + deep + "}", kLimits);
    ADD_FAILURE() << "deep nesting accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("more than 32 deep"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::serve
