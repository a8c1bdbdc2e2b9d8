#include "tessera/serve/openai_api.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "tessera/core/json_nesting.h"

namespace tessera::serve {

using nlohmann::json;

ApiError::ApiError(int status, std::string message, std::string type, std::string param,
                   std::string code)
    : Error(std::move(message)),
      status_(status),
      type_(std::move(type)),
      param_(std::move(param)),
      code_(std::move(code)) {}

json ApiError::body() const {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error",
           {{"message", what()},
            {"type", type_},
            {"param", or_null(param_)},
            {"code", or_null(code_)}}}};
}

ApiError& ApiError::with_header(std::string name, std::string value) {
  headers_.emplace_back(std::move(name), std::move(value));
  return *this;
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message,
                      const std::string& code = {}) {
  throw ApiError(400, message, "invalid_request_error", param, code);
}

// A value as an error message shows it: scalars as written (a string cut to a few dozen
// characters), arrays and objects by their size alone, so no message grows with the input.
std::string describe(const json& v) {
  constexpr size_t kShown = 40;
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    if (s.size() <= kShown) return json_text(s);
    return json_text(s.substr(0, kShown)) + fmt::format(" (cut from {} bytes)", s.size());
  }
  if (v.is_array()) return fmt::format("an array of {} items", v.size());
  if (v.is_object()) return fmt::format("an object of {} fields", v.size());
  return v.dump();
}

// A present, non-null field, or nullptr.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> number_field(const json& body, const char* name, double lo, double hi,
                                   bool lo_open = false) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number, not {}", name, describe(*v)));
  const double x = v->get<double>();
  const bool low_ok = lo_open ? x > lo : x >= lo;
  if (!std::isfinite(x) || !low_ok || x > hi) {
    bad(name, fmt::format("'{}' is {} but must lie in {}{}, {}]", name, describe(*v),
                          lo_open ? "(" : "[", lo, hi));
  }
  return x;
}

std::optional<int64_t> integer_field(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) {
    bad(name, fmt::format("'{}' must be an integer, not {}", name, describe(*v)));
  }
  // Unsigned values beyond int64 read as negative; compare in double to catch them too.
  const double x = v->get<double>();
  if (x < double(lo) || x > double(hi)) {
    bad(name, fmt::format("'{}' is {} but must lie in [{}, {}]", name, describe(*v), lo, hi));
  }
  return v->get<int64_t>();
}

std::optional<bool> bool_field(const json& body, const char* name) {
  const json* v = field(body, name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean())
    bad(name, fmt::format("'{}' must be true or false, not {}", name, describe(*v)));
  return v->get<bool>();
}

std::vector<std::string> stop_strings(const json& body) {
  const json* v = field(body, "stop");
  if (v == nullptr) return {};
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array() && v->size() <= 4) {
    for (const json& s : *v) {
      if (!s.is_string()) bad("stop", "'stop' must be a string or an array of up to 4 strings");
      stops.push_back(s.get<std::string>());
    }
  } else {
    bad("stop", "'stop' must be a string or an array of up to 4 strings");
  }
  for (const std::string& s : stops) {
    if (s.empty()) bad("stop", "'stop' strings must not be empty");
  }
  return stops;
}

void parse_prompt(const json& body, ApiRequest& r) {
  const json* p = field(body, "prompt");
  if (p == nullptr) bad("prompt", "'prompt' is required");
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt = p->get<std::string>();
    if (r.prompt.empty()) bad("prompt", "'prompt' is empty: give at least one character");
    return;
  }
  if (p->is_array() && !p->empty() &&
      std::all_of(p->begin(), p->end(), [](const json& t) { return t.is_number_integer(); })) {
    for (const json& t : *p) {
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id > INT32_MAX) bad("prompt", fmt::format("token id {} is out of range", id));
      r.prompt_tokens.push_back(int32_t(id));
    }
    return;
  }
  bad("prompt",
      "'prompt' must be a non-empty string, an array of one string, or an array of token ids");
}

std::string message_content(const json& message, size_t index) {
  const std::string param = fmt::format("messages[{}].content", index);
  const json* content = field(message, "content");
  if (content == nullptr) bad(param, fmt::format("'{}' is required", param));
  if (content->is_string()) return content->get<std::string>();
  if (!content->is_array())
    bad(param, fmt::format("'{}' must be a string or an array of text parts", param));
  std::string text;
  for (const json& part : *content) {
    const json* type = part.is_object() ? field(part, "type") : nullptr;
    const json* text_part = part.is_object() ? field(part, "text") : nullptr;
    if (type == nullptr || *type != "text" || text_part == nullptr || !text_part->is_string()) {
      bad(param, fmt::format("'{}' parts must be {{\"type\": \"text\", \"text\": ...}}; this "
                             "model reads only text",
                             param));
    }
    text += text_part->get<std::string>();
  }
  return text;
}

void parse_sampling(const json& body, ApiRequest& r) {
  SamplerParams& s = r.generation.sampling;
  s.temperature = number_field(body, "temperature", 0.0, 2.0).value_or(1.0);
  s.top_p = number_field(body, "top_p", 0.0, 1.0, /*lo_open=*/true).value_or(1.0);
  const int64_t top_k = integer_field(body, "top_k", -1, INT32_MAX).value_or(0);
  s.top_k = top_k < 0 ? 0 : top_k;  // vLLM's -1 also means off
  s.min_p = number_field(body, "min_p", 0.0, 1.0).value_or(0.0);
  s.repetition_penalty =
      number_field(body, "repetition_penalty", 0.0, 1e6, /*lo_open=*/true).value_or(1.0);
  s.presence_penalty = number_field(body, "presence_penalty", -2.0, 2.0).value_or(0.0);
  s.frequency_penalty = number_field(body, "frequency_penalty", -2.0, 2.0).value_or(0.0);
  s.seed = uint64_t(integer_field(body, "seed", INT64_MIN, INT64_MAX).value_or(0));
  try {
    validate(s);
  } catch (const SamplerParamError& e) {
    bad(e.param(), e.what());
  }
}

void refuse_unsupported(const json& body) {
  if (integer_field(body, "n", 1, 1).value_or(1) != 1) bad("n", "'n' must be 1");
  if (integer_field(body, "best_of", 1, 1).value_or(1) != 1) bad("best_of", "'best_of' must be 1");
  if (bool_field(body, "echo").value_or(false)) bad("echo", "'echo' is not supported");
  if (const json* suffix = field(body, "suffix"); suffix != nullptr) {
    bad("suffix", "'suffix' is not supported");
  }
  if (const json* bias = field(body, "logit_bias"); bias != nullptr && !bias->empty()) {
    bad("logit_bias", "'logit_bias' is not supported");
  }
  // Structured outputs and tool calls change what a reply may hold; answering as if they were
  // absent would hand the client text it did not ask for.
  if (const json* format = field(body, "response_format");
      format != nullptr && !(format->is_object() && format->value("type", json()) == "text")) {
    bad("response_format",
        "'response_format' other than {\"type\": \"text\"} is not supported: this server does "
        "not constrain its output to JSON");
  }
  if (const json* tools = field(body, "tools"); tools != nullptr && !tools->empty()) {
    bad("tools", "'tools' is not supported: this server does not make tool calls");
  }
  if (const json* choice = field(body, "tool_choice"); choice != nullptr && *choice != "none") {
    bad("tool_choice", "'tool_choice' other than \"none\" is not supported");
  }
  for (const char* legacy : {"functions", "function_call"}) {
    if (field(body, legacy) != nullptr) {
      bad(legacy,
          fmt::format("'{}' is not supported: this server does not make tool calls", legacy));
    }
  }
}

// The conversation checked: a non-empty array of messages with a known role and text content,
// each reduced to {"role", "content": text}.
json chat_messages(const json& messages) {
  if (!messages.is_array() || messages.empty()) {
    bad("messages", "'messages' must be a non-empty array of {\"role\", \"content\"} objects");
  }
  json checked = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string param = fmt::format("messages[{}].role", i);
    if (!m.is_object()) bad(fmt::format("messages[{}]", i), "each message must be an object");
    const json* role = field(m, "role");
    if (role == nullptr || !role->is_string()) bad(param, fmt::format("'{}' is required", param));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant") {
      bad(param, fmt::format("'{}' is {}; use system, developer, user or assistant", param,
                             describe(*role)));
    }
    checked.push_back({{"role", r}, {"content", message_content(m, i)}});
  }
  return checked;
}

}  // namespace

std::string render_chat(const json& messages) {
  std::string text;
  for (const json& m : messages) {
    const std::string& role = m["role"].get_ref<const std::string&>();
    const char* speaker = role == "system" || role == "developer" ? "System"
                          : role == "user"                        ? "User"
                                                                  : "Assistant";
    text += fmt::format("{}: {}\n", speaker, m["content"].get_ref<const std::string&>());
  }
  return text + "Assistant:";
}

ApiRequest parse_request(Endpoint endpoint, const std::string& body_text, const ApiLimits& limits) {
  if (json_nesting_depth(body_text, kMaxJsonNesting) > kMaxJsonNesting) {
    bad("", fmt::format("the request body nests arrays and objects more than {} deep",
                        kMaxJsonNesting));
  }
  json body;
  try {
    body = json::parse(body_text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    // The parser's message quotes the last token it read, which may be most of the body.
    constexpr size_t kShown = 160;
    std::string why = e.what();
    if (why.size() > kShown) why = why.substr(0, kShown) + "...";
    bad("", fmt::format("the request body is not valid JSON: {}", why));
  }
  if (!body.is_object()) bad("", "the request body must be a JSON object");
  ApiRequest r;
  r.endpoint = endpoint;
  const json* model = field(body, "model");
  if (model == nullptr || !model->is_string()) bad("model", "'model' must name the model");
  if (model->get<std::string>() != limits.model_name) {
    throw ApiError(404,
                   fmt::format("the model {} does not exist; this server serves '{}'",
                               describe(*model), limits.model_name),
                   "invalid_request_error", "model", "model_not_found");
  }
  if (endpoint == Endpoint::kTokenize) {
    // vLLM's form: a prompt, or messages with add_generation_prompt (default true).
    if (const json* messages = field(body, "messages"); messages != nullptr) {
      r.messages = chat_messages(*messages);
      r.add_generation_prompt = bool_field(body, "add_generation_prompt").value_or(true);
    } else {
      parse_prompt(body, r);
    }
    return r;
  }
  refuse_unsupported(body);
  if (endpoint == Endpoint::kChatCompletions) {
    const json* messages = field(body, "messages");
    if (messages == nullptr) bad("messages", "'messages' is required");
    r.messages = chat_messages(*messages);
  } else {
    parse_prompt(body, r);
  }
  const char* max_name =
      endpoint == Endpoint::kChatCompletions && field(body, "max_completion_tokens") != nullptr
          ? "max_completion_tokens"
          : "max_tokens";
  r.max_tokens = integer_field(body, max_name, 1, limits.max_tokens_cap);
  parse_sampling(body, r);
  r.generation.stop = stop_strings(body);
  if (endpoint == Endpoint::kChatCompletions) {
    if (bool_field(body, "logprobs").value_or(false)) {
      r.generation.top_logprobs =
          integer_field(body, "top_logprobs", 0, kMaxTopLogprobs).value_or(0);
    } else if (field(body, "top_logprobs") != nullptr) {
      bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
  } else {
    r.generation.top_logprobs = integer_field(body, "logprobs", 0, 5).value_or(-1);
  }
  r.stream = bool_field(body, "stream").value_or(false);
  if (const json* options = field(body, "stream_options"); options != nullptr) {
    if (!options->is_object()) bad("stream_options", "'stream_options' must be an object");
    if (!r.stream) bad("stream_options", "'stream_options' needs 'stream': true");
    r.include_usage = bool_field(*options, "include_usage").value_or(false);
  }
  return r;
}

std::vector<int32_t> prompt_tokens(ApiRequest& request, const tokenizer::Tokenizer& tokenizer,
                                   const ChatTemplate* chat_template) {
  if (!request.messages.is_null()) {
    if (chat_template == nullptr) return tokenizer.encode(render_chat(request.messages));
    std::string text;
    try {
      text = chat_template->render(request.messages, request.add_generation_prompt);
    } catch (const Error& e) {
      bad("messages",
          fmt::format("the model's chat template refuses the conversation: {}", e.what()));
    }
    return tokenizer.encode_allowing_special(text);
  }
  for (int32_t id : request.prompt_tokens) {
    if (id >= tokenizer.vocab_size()) {
      bad("prompt",
          fmt::format("token id {} is outside the vocabulary of {}", id, tokenizer.vocab_size()));
    }
  }
  if (!request.prompt_tokens.empty()) return std::move(request.prompt_tokens);
  return tokenizer.encode(request.prompt);
}

GenerationRequest to_generation(ApiRequest request, const tokenizer::Tokenizer& tokenizer,
                                const ApiLimits& limits, const ChatTemplate* chat_template) {
  GenerationRequest g = std::move(request.generation);
  const char* param = request.endpoint == Endpoint::kChatCompletions ? "messages" : "prompt";
  g.prompt = prompt_tokens(request, tokenizer, chat_template);
  if (request.endpoint == Endpoint::kChatCompletions && chat_template == nullptr) {
    g.stop.insert(g.stop.end(), kChatStops.begin(), kChatStops.end());
  }
  const int64_t prompt = int64_t(g.prompt.size());
  if (prompt == 0) bad(param, fmt::format("'{}' is empty", param));
  const int64_t room = limits.context - prompt;
  if (room < 1) {
    bad(param,
        fmt::format("the prompt is {} tokens but the model's context is {} tokens, leaving no "
                    "room to generate",
                    prompt, limits.context),
        "context_length_exceeded");
  }
  if (request.max_tokens) {
    if (*request.max_tokens > room) {
      bad("max_tokens",
          fmt::format("the model's context is {} tokens: the prompt's {} tokens leave room for "
                      "{}, but max_tokens asks for {}",
                      limits.context, prompt, room, *request.max_tokens),
          "context_length_exceeded");
    }
    g.max_tokens = *request.max_tokens;
  } else {
    const int64_t fallback =
        request.endpoint == Endpoint::kCompletions ? 16 : limits.max_tokens_cap;
    g.max_tokens = std::min(fallback, room);
  }
  return g;
}

std::string json_text(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

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
                                 const tokenizer::Tokenizer& tokenizer, bool with_logprobs)
    : endpoint_(endpoint),
      model_name_(std::move(model_name)),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      tokenizer_(tokenizer),
      with_logprobs_(with_logprobs) {
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

json ResponseBuilder::choice(const std::vector<GeneratedToken>& tokens, bool delta) const {
  std::string text;
  for (const GeneratedToken& t : tokens) text += t.text;
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

json ResponseBuilder::chunk(const std::vector<GeneratedToken>& tokens) {
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

json ResponseBuilder::final_chunk(FinishReason reason) const {
  json j = envelope(endpoint_ == Endpoint::kChatCompletions ? "chat.completion.chunk"
                                                            : "text_completion");
  json c = choice({}, /*delta=*/true);
  c["finish_reason"] = finish_reason_name(reason);
  if (endpoint_ == Endpoint::kChatCompletions) c["delta"] = json::object();
  c["logprobs"] = nullptr;
  j["choices"] = json::array({c});
  return j;
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
  j["choices"] = json::array({c});
  j["usage"] = usage_json(usage);
  return j;
}

}  // namespace tessera::serve
