#include "tessera/serve/response_builder.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>

#include "tessera/serve/tool_calls.h"

namespace tessera::serve {

using nlohmann::json;

json usage_json(const TokenUsage& usage) {
  json j = {{"prompt_tokens", usage.prompt},
            {"completion_tokens", usage.completion},
            {"total_tokens", usage.prompt + usage.completion}};
  if (usage.accepted_prediction + usage.rejected_prediction > 0) {
    j["completion_tokens_details"] = {{"accepted_prediction_tokens", usage.accepted_prediction},
                                      {"rejected_prediction_tokens", usage.rejected_prediction}};
  }
  return j;
}

ResponseBuilder::ResponseBuilder(Endpoint endpoint, std::string model_name,
                                 const tokenizer::Tokenizer& tokenizer, bool with_logprobs,
                                 std::vector<std::string> tool_names)
    : endpoint_(endpoint),
      model_name_(std::move(model_name)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      tokenizer_(tokenizer),
      with_logprobs_(with_logprobs),
      tool_names_(std::move(tool_names)),
      holding_(!tool_names_.empty()) {
  static std::atomic<uint64_t> counter = 0;
  id_ = fmt::format("{}-{:x}{:06x}", endpoint == Endpoint::kChatCompletions ? "chatcmpl" : "cmpl",
                    created_, counter++);
}

json ResponseBuilder::envelope(const char* object) const {
  return {{"id", id_}, {"object", object}, {"created", created_}, {"model", model_name_}};
}

namespace {

// JSON has no -inf (a masked token); OpenAI writes -9999 instead.
double finite_logprob(double logprob) { return std::max(logprob, -9999.0); }

}  // namespace

json ResponseBuilder::logprobs(const std::vector<GeneratedToken>& tokens) const {
  auto token_text = [&](int32_t id) { return tokenizer_.decode(std::span<const int32_t>(&id, 1)); };
  auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(int(c));
    return b;
  };
  if (endpoint_ == Endpoint::kChatCompletions) {
    json content = json::array();
    for (const GeneratedToken& t : tokens) {
      const std::string text = token_text(t.id);
      json top = json::array();
      for (const TokenLogprob& alt : t.logprobs.top) {
        const std::string alt_text = token_text(alt.token);
        top.push_back({{"token", alt_text},
                       {"logprob", finite_logprob(alt.logprob)},
                       {"bytes", bytes(alt_text)}});
      }
      content.push_back({{"token", text},
                         {"logprob", finite_logprob(t.logprobs.chosen.logprob)},
                         {"bytes", bytes(text)},
                         {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json lp = {{"tokens", json::array()},
             {"token_logprobs", json::array()},
             {"top_logprobs", json::array()},
             {"text_offset", json::array()}};
  int64_t offset = text_offset_;
  for (const GeneratedToken& t : tokens) {
    const std::string text = token_text(t.id);
    lp["tokens"].push_back(text);
    lp["token_logprobs"].push_back(finite_logprob(t.logprobs.chosen.logprob));
    json top = json::object();
    for (const TokenLogprob& alt : t.logprobs.top)
      top[token_text(alt.token)] = finite_logprob(alt.logprob);
    lp["top_logprobs"].push_back(top);
    lp["text_offset"].push_back(offset);
    offset += int64_t(text.size());
  }
  return lp;
}

namespace {

std::string joined_text(const std::vector<GeneratedToken>& tokens) {
  std::string text;
  for (const GeneratedToken& t : tokens) text += t.text;
  return text;
}

// Calls as a streamed delta lists them, each with its place.
json indexed_calls(json calls) {
  for (size_t i = 0; i < calls.size(); ++i) calls[i]["index"] = i;
  return calls;
}

}  // namespace

json ResponseBuilder::choice(const std::vector<GeneratedToken>& tokens, bool delta) const {
  const std::string text = joined_text(tokens);
  json c = {{"index", 0}, {"finish_reason", nullptr}};
  c["logprobs"] = with_logprobs_ ? logprobs(tokens) : json(nullptr);
  if (endpoint_ == Endpoint::kCompletions) {
    c["text"] = text;
  } else if (delta) {
    c["delta"] = {{"content", text}};
  } else {
    c["message"] = {{"role", "assistant"}, {"content", text}};
  }
  return c;
}

json ResponseBuilder::delta_chunk(json delta, json logprobs) {
  if (!role_sent_) {
    delta["role"] = "assistant";
    role_sent_ = true;
  }
  json j = envelope("chat.completion.chunk");
  j["choices"] = json::array({{{"index", 0},
                               {"delta", std::move(delta)},
                               {"logprobs", logprobs},
                               {"finish_reason", nullptr}}});
  return j;
}

std::optional<json> ResponseBuilder::chunk(const std::vector<GeneratedToken>& tokens) {
  if (holding_) {
    held_ += joined_text(tokens);
    if (may_be_tool_call(held_)) return std::nullopt;
    holding_ = false;
    return delta_chunk({{"content", std::exchange(held_, "")}},
                       with_logprobs_ ? logprobs(tokens) : json(nullptr));
  }
  json j = envelope(endpoint_ == Endpoint::kChatCompletions ? "chat.completion.chunk"
                                                            : "text_completion");
  json c = choice(tokens, /*delta=*/true);
  if (endpoint_ == Endpoint::kChatCompletions && !role_sent_) {
    c["delta"]["role"] = "assistant";
    role_sent_ = true;
  }
  for (const GeneratedToken& t : tokens) {
    text_offset_ += int64_t(tokenizer_.decode(std::span<const int32_t>(&t.id, 1)).size());
  }
  j["choices"] = json::array({c});
  return j;
}

std::vector<json> ResponseBuilder::final_chunks(FinishReason reason) {
  std::vector<json> chunks;
  std::string_view finish = finish_reason_name(reason);
  if (holding_ && !held_.empty()) {
    const std::optional<FoundCalls> found = tool_calls_in(held_, tool_names_);
    if (found) {
      chunks.push_back(
          delta_chunk({{"content", found->content.empty() ? json(nullptr) : json(found->content)},
                       {"tool_calls", indexed_calls(found->calls)}},
                      nullptr));
      if (reason == FinishReason::kStop) finish = "tool_calls";
    } else {
      chunks.push_back(delta_chunk({{"content", held_}}, nullptr));
    }
  }
  json j = envelope(endpoint_ == Endpoint::kChatCompletions ? "chat.completion.chunk"
                                                            : "text_completion");
  json c = choice({}, /*delta=*/true);
  c["finish_reason"] = finish;
  if (endpoint_ == Endpoint::kChatCompletions) c["delta"] = json::object();
  c["logprobs"] = nullptr;
  j["choices"] = json::array({c});
  chunks.push_back(std::move(j));
  return chunks;
}

json ResponseBuilder::usage_chunk(const TokenUsage& usage) const {
  json j = envelope(endpoint_ == Endpoint::kChatCompletions ? "chat.completion.chunk"
                                                            : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

json ResponseBuilder::response(const std::vector<GeneratedToken>& tokens, FinishReason reason,
                               const TokenUsage& usage) const {
  json j =
      envelope(endpoint_ == Endpoint::kChatCompletions ? "chat.completion" : "text_completion");
  json c = choice(tokens, /*delta=*/false);
  c["finish_reason"] = finish_reason_name(reason);
  if (!tool_names_.empty()) {
    if (const auto found = tool_calls_in(joined_text(tokens), tool_names_); found) {
      c["message"]["content"] = found->content.empty() ? json(nullptr) : json(found->content);
      c["message"]["tool_calls"] = found->calls;
      if (reason == FinishReason::kStop) c["finish_reason"] = "tool_calls";
    }
  }
  j["choices"] = json::array({c});
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace tessera::serve
