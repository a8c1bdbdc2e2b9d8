#include "tessera/serve/openai_api.h"

#include <algorithm>
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
  } catch (const ParamError& e) {
    bad(e.param(), e.what());
  }
}

// response_format: text (no constraint), json_object (any object), or json_schema, whose schema
// is read again from the body keeping its properties' order, in which the reply writes them.
void parse_response_format(const json& body, const nlohmann::ordered_json& ordered_body,
                           ApiRequest& r) {
  const json* format = field(body, "response_format");
  if (format == nullptr) return;
  const json* named = format->is_object() ? field(*format, "type") : nullptr;
  const std::string type = named != nullptr && named->is_string() ? named->get<std::string>() : "";
  if (type == "text") return;
  if (type == "json_object") {
    r.response_grammar = std::make_shared<grammar::JsonGrammar>(grammar::any_json_object());
    r.response_key = type;
    return;
  }
  if (type != "json_schema") {
    bad("response_format",
        "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
        "{\"type\": \"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}");
  }
  const json* wrapper = field(*format, "json_schema");
  if (wrapper == nullptr || !wrapper->is_object() || !wrapper->contains("schema")) {
    bad("response_format", "'response_format.json_schema' must be an object with a 'schema'");
  }
  if (const json* strict = field(*wrapper, "strict"); strict != nullptr && !strict->is_boolean()) {
    bad("response_format", "'response_format.json_schema.strict' must be true or false");
  }
  const nlohmann::ordered_json& schema = ordered_body["response_format"]["json_schema"]["schema"];
  try {
    r.response_grammar =
        std::make_shared<grammar::JsonGrammar>(grammar::compile_json_schema(schema));
  } catch (const grammar::SchemaError& e) {
    bad("response_format", fmt::format("'response_format.json_schema' {}", e.what()));
  }
  r.response_key = "json_schema " + schema.dump();
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
  // The calls before tools; answering as if they were absent would hand the client text it did
  // not ask for.
  for (const char* legacy : {"functions", "function_call"}) {
    if (field(body, legacy) != nullptr) {
      bad(legacy, fmt::format("'{}' is not supported: give 'tools' and 'tool_choice'", legacy));
    }
  }
}

// An assistant message's tool_calls checked, their arguments parsed for the chat template.
json checked_tool_calls(const json& calls, size_t index) {
  const std::string param = fmt::format("messages[{}].tool_calls", index);
  if (!calls.is_array()) bad(param, fmt::format("'{}' must be an array of calls", param));
  for (const json& call : calls) {
    const json* function = call.is_object() ? field(call, "function") : nullptr;
    if (function == nullptr || !function->is_object() ||
        !function->value("name", json()).is_string() ||
        !function->value("arguments", json()).is_string()) {
      bad(param, fmt::format("each of '{}' must be {{\"id\", \"type\": \"function\", "
                             "\"function\": {{\"name\", \"arguments\": JSON text}}}}",
                             param));
    }
  }
  return calls_for_template(calls);
}

// The conversation checked: a non-empty array of messages with a known role and text content,
// each reduced to {"role", "content": text}, with an assistant's tool_calls and a tool message's
// tool_call_id.
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
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      bad(param, fmt::format("'{}' is {}; use system, developer, user, assistant or tool", param,
                             describe(*role)));
    }
    const json* calls = r == "assistant" ? field(m, "tool_calls") : nullptr;
    const json* content = field(m, "content");
    const bool calls_only = calls != nullptr && (content == nullptr || content->is_null());
    json message = {{"role", r}, {"content", calls_only ? "" : message_content(m, i)}};
    if (calls != nullptr) message["tool_calls"] = checked_tool_calls(*calls, i);
    if (r == "tool") {
      const json* id = field(m, "tool_call_id");
      if (id == nullptr || !id->is_string()) {
        bad(fmt::format("messages[{}].tool_call_id", i),
            "a tool message needs the 'tool_call_id' of the call it answers");
      }
      message["tool_call_id"] = *id;
      if (const json* name = field(m, "name"); name != nullptr && name->is_string()) {
        message["name"] = *name;
      }
    }
    checked.push_back(std::move(message));
  }
  return checked;
}

}  // namespace

std::string render_chat(const json& messages, const nlohmann::ordered_json& tools) {
  std::string text;
  if (!tools.is_null()) {
    text =
        "System: To call a tool, answer with {\"name\": ..., \"arguments\": {...}} and "
        "nothing else. Tools: " +
        tools.dump() + "\n";
  }
  for (const json& m : messages) {
    const std::string& role = m["role"].get_ref<const std::string&>();
    const char* speaker = role == "system" || role == "developer" ? "System"
                          : role == "user"                        ? "User"
                          : role == "tool"                        ? "Tool"
                                                                  : "Assistant";
    std::string said = m["content"].get<std::string>();
    for (const json& call : m.value("tool_calls", json::array())) {
      said += json{{"name", call["function"]["name"]}, {"arguments", call["function"]["arguments"]}}
                  .dump();
    }
    text += fmt::format("{}: {}\n", speaker, said);
  }
  return text + "Assistant:";
}

json request_body(const std::string& body_text) {
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
  return body;
}

ApiRequest parse_request(Endpoint endpoint, const std::string& body_text, const ApiLimits& limits) {
  const json body = request_body(body_text);
  ApiRequest r;
  r.endpoint = endpoint;
  const json* model = field(body, "model");
  if (model == nullptr || !model->is_string()) bad("model", "'model' must name the model");
  r.model = model->get<std::string>();
  if (r.model != limits.model_name) {
    const std::string prefix = limits.model_name + ":";
    r.adapter = r.model.starts_with(prefix) ? r.model.substr(prefix.size()) : r.model;
    if (limits.adapters == nullptr || !limits.adapters->serves(r.adapter)) {
      throw unknown_model(r.model, limits);
    }
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
  const bool ordered_needed =
      field(body, "response_format") != nullptr || field(body, "tools") != nullptr;
  const nlohmann::ordered_json ordered =
      ordered_needed ? nlohmann::ordered_json::parse(body_text) : nlohmann::ordered_json();
  parse_response_format(body, ordered, r);
  if (endpoint == Endpoint::kChatCompletions) {
    try {
      r.tools = parse_tools(body, ordered);
    } catch (const ParamError& e) {
      bad(e.param(), e.what());
    }
  } else if (field(body, "tools") != nullptr) {
    bad("tools", "'tools' is for /v1/chat/completions");
  }
  if (r.tools.call_grammar) {
    if (r.response_grammar) {
      bad("response_format",
          "'response_format' cannot hold a reply that 'tool_choice' requires to be a tool call");
    }
    r.response_grammar = r.tools.call_grammar;
    r.response_key = r.tools.call_key;
  }
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
                                   const jinja::ChatTemplate* chat_template) {
  if (!request.messages.is_null()) {
    if (chat_template == nullptr) {
      return tokenizer.encode(render_chat(request.messages, request.tools.tools));
    }
    std::string text;
    try {
      const nlohmann::ordered_json extra =
          request.tools.tools.is_null() ? nlohmann::ordered_json()
                                        : nlohmann::ordered_json{{"tools", request.tools.tools}};
      text = chat_template->render(request.messages, request.add_generation_prompt, extra);
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

ApiError unknown_model(const std::string& model, const ApiLimits& limits) {
  const std::string also = limits.adapters == nullptr ? "" : " and its LoRA adapters (/v1/models)";
  return ApiError(404,
                  fmt::format("the model {} does not exist; this server serves '{}'{}",
                              describe(model), limits.model_name, also),
                  "invalid_request_error", "model", "model_not_found");
}

GenerationRequest to_generation(ApiRequest request, const tokenizer::Tokenizer& tokenizer,
                                const ApiLimits& limits, const jinja::ChatTemplate* chat_template) {
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

}  // namespace tessera::serve
