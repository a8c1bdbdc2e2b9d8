// The OpenAI wire format: request bodies of /v1/completions and /v1/chat/completions checked and
// turned into generation requests, and the engine's output turned into response objects and
// stream chunks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/grammar/json_schema.h"
#include "tessera/jinja/chat_template.h"
#include "tessera/serve/engine.h"
#include "tessera/serve/tool_calls.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::serve {

// A request the server answers with an HTTP error status and OpenAI's error object.
class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = {}, std::string code = {});
  int status() const { return status_; }
  // {"error": {"message", "type", "param", "code"}}, param and code null when empty.
  nlohmann::json body() const;
  // HTTP headers the answer carries (Allow for a 405, Retry-After for a 429 or 503).
  ApiError& with_header(std::string name, std::string value);
  const std::vector<std::pair<std::string, std::string>>& headers() const { return headers_; }

 private:
  int status_;
  std::string type_, param_, code_;
  std::vector<std::pair<std::string, std::string>> headers_;
};

// kTokenize: vLLM's /tokenize, a prompt or a conversation turned into the model's tokens.
enum class Endpoint { kCompletions, kChatCompletions, kTokenize };

// What the server accepts, for checking requests.
struct ApiLimits {
  std::string model_name;
  int64_t context = 0;         // the model's max_seq
  int64_t max_tokens_cap = 0;  // the largest max_tokens a request may ask for
  // The LoRA adapters served beside the model (null: none): a request names one as "NAME" or
  // "MODEL:NAME", as vLLM's clients do.
  const ServedAdapters* adapters = nullptr;
};

// A checked request: the engine's part still needs its prompt tokenized.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                   // as the request named it: the model, or one of its adapters
  std::string adapter;                 // the adapter it names; empty: the model alone
  std::string prompt;                  // text (completions, and tokenize without messages)
  std::vector<int32_t> prompt_tokens;  // given directly as token ids (completions only)
  nlohmann::json messages;             // a checked conversation: {"role", "content": text}
  bool add_generation_prompt = true;   // the conversation ends opening the assistant's turn
  std::optional<int64_t>
      max_tokens;                // absent: 16 for completions, the rest of the context for chat
  GenerationRequest generation;  // every field but prompt and max_tokens
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // response_format json_object or json_schema, compiled; response_key names it (the same
  // format, the same key) so requests alike share one grammar's token masks.
  std::shared_ptr<const grammar::JsonGrammar> response_grammar;
  std::string response_key;
  ToolUse tools;  // chat only
};

// How deeply a request body's arrays and objects may nest (a chat message's text parts sit at
// depth 4); deeper bodies are refused before they are parsed.
constexpr int64_t kMaxJsonNesting = 32;

// A request body parsed as a JSON object, nested at most kMaxJsonNesting deep; else a 400.
nlohmann::json request_body(const std::string& body_text);
// Parses and checks a request body; throws ApiError (400, or 404 for an unknown model or
// adapter) naming the parameter at fault.
ApiRequest parse_request(Endpoint endpoint, const std::string& body, const ApiLimits& limits);
// The 404 for a request whose model (as it named it) is neither the model nor one of its adapters.
ApiError unknown_model(const std::string& model, const ApiLimits& limits);

// The prompt's tokens: the ids given, the text encoded (special tokens spelled in it are
// ordinary text), or the conversation rendered by the model's chat template and encoded with the
// special tokens it writes recognised, as Transformers' apply_chat_template and vLLM do (so
// message text that spells a special token is that token). Without a template (nullptr) the
// conversation takes the built-in form of render_chat. A template's raise_exception() is a 400.
std::vector<int32_t> prompt_tokens(ApiRequest& request, const tokenizer::Tokenizer& tokenizer,
                                   const jinja::ChatTemplate* chat_template);

// Tokenizes the prompt and fixes max_tokens against the context: a prompt that fills the context,
// or an explicit max_tokens that runs past it, is a 400 (code context_length_exceeded).
GenerationRequest to_generation(ApiRequest request, const tokenizer::Tokenizer& tokenizer,
                                const ApiLimits& limits,
                                const jinja::ChatTemplate* chat_template = nullptr);

// The built-in chat form, for a model without a chat template: each message as "System: ...",
// "User: ...", "Assistant: ..." (its tool calls as JSON) or "Tool: ..." on its own line, then
// "Assistant:" for the model to continue; tools, when given, first in a system line that tells
// how to call them. Such chats also stop at "\nUser:" and "\nSystem:", so the model answers one
// turn.
std::string render_chat(const nlohmann::json& messages,
                        const nlohmann::ordered_json& tools = nlohmann::ordered_json());
inline const std::vector<std::string> kChatStops = {"\nUser:", "\nSystem:"};

// JSON text for the wire, with invalid UTF-8 (from a client's strings) replaced, never thrown on.
std::string json_text(const nlohmann::json& j);

}  // namespace tessera::serve
