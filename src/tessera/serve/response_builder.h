// The engine's output turned into OpenAI's response objects and stream chunks.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tessera/serve/engine.h"
#include "tessera/serve/openai_api.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::serve {

// Builds the response objects of one request, streamed as chunks or whole. With tool_names (a
// chat whose tools may be called), a reply that is tool calls (tool_calls_in) answers with
// tool_calls and finish_reason "tool_calls"; streamed, text that may still be calls is held back
// (its log-probabilities are not sent) until it is known.
class ResponseBuilder {
 public:
  ResponseBuilder(Endpoint endpoint, std::string model_name, const tokenizer::Tokenizer& tokenizer,
                  bool with_logprobs, std::vector<std::string> tool_names = {});

  // A stream chunk carrying tokens' text (and log-probabilities); the first chat chunk also
  // carries the assistant role. None while the text is held back.
  std::optional<nlohmann::json> chunk(const std::vector<GeneratedToken>& tokens);
  // The stream's last chunks: what was held back (as calls or text), then the finish reason.
  std::vector<nlohmann::json> final_chunks(FinishReason reason);
  // The usage-only chunk sent when stream_options.include_usage is set.
  nlohmann::json usage_chunk(const TokenUsage& usage) const;
  // A non-streamed response holding every token.
  nlohmann::json response(const std::vector<GeneratedToken>& tokens, FinishReason reason,
                          const TokenUsage& usage) const;

 private:
  nlohmann::json envelope(const char* object) const;
  nlohmann::json choice(const std::vector<GeneratedToken>& tokens, bool delta) const;
  nlohmann::json delta_chunk(nlohmann::json delta, nlohmann::json logprobs);
  nlohmann::json logprobs(const std::vector<GeneratedToken>& tokens) const;

  Endpoint endpoint_;
  std::string model_name_, id_;
  int64_t created_;
  const tokenizer::Tokenizer& tokenizer_;
  bool with_logprobs_;
  bool role_sent_ = false;
  int64_t text_offset_ = 0;  // completions' logprobs.text_offset
  std::vector<std::string> tool_names_;
  bool holding_ = true;  // with tool names: the text so far may be calls
  std::string held_;
};

// OpenAI's usage object; completion_tokens_details only when speculation drafted tokens.
nlohmann::json usage_json(const TokenUsage& usage);

}  // namespace tessera::serve
