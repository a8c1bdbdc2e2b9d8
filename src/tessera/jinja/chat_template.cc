#include "tessera/jinja/chat_template.h"

#include <fmt/format.h>

#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/text_corpus.h"

namespace tessera::jinja {

namespace {

std::string template_source(const nlohmann::json& config) {
  const auto it = config.find("chat_template");
  check(it != config.end() && !it->is_null(),
        "tokenizer_config.json has no chat_template, so it does not say how to turn a "
        "conversation into a prompt");
  if (it->is_string()) return it->get<std::string>();
  check(it->is_array(),
        "chat_template in tokenizer_config.json must be a string or a list of "
        "{{\"name\", \"template\"}} objects");
  std::string names;
  for (const nlohmann::json& named : *it) {
    check(named.is_object() && named.value("name", nlohmann::json()).is_string() &&
              named.value("template", nlohmann::json()).is_string(),
          "each chat_template in tokenizer_config.json's list must be an object with a "
          "\"name\" and a \"template\" string");
    if (named["name"] == "default") return named["template"].get<std::string>();
    names += (names.empty() ? "'" : ", '") + named["name"].get<std::string>() + "'";
  }
  fail("tokenizer_config.json has chat templates named {} but none named 'default'",
       names.empty() ? "(none)" : names);
}

}  // namespace

ChatTemplate::ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token)
    : template_(source), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {}

nlohmann::ordered_json ChatTemplate::context(const nlohmann::ordered_json& messages,
                                             bool add_generation_prompt,
                                             const nlohmann::ordered_json& extra) const {
  check(messages.is_array(), "the messages of a chat must be a JSON array, not {}",
        messages.type_name());
  check(extra.is_object() || extra.is_null(),
        "the extra variables of a chat template must be a JSON object, not {}", extra.type_name());
  nlohmann::ordered_json context = {
      {"messages", messages},    {"tools", nullptr},
      {"documents", nullptr},    {"add_generation_prompt", add_generation_prompt},
      {"bos_token", bos_token_}, {"eos_token", eos_token_},
  };
  if (extra.is_object()) {
    for (const auto& [key, value] : extra.items()) context[key] = value;
  }
  return context;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra) const {
  return template_.render(context(messages, add_generation_prompt, extra));
}

std::string special_token_text(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  fail("{} in tokenizer_config.json must be a string or an object with a \"content\" string", key);
}

ChatTemplate chat_template_from_tokenizer_config(const nlohmann::json& tokenizer_config) {
  check(tokenizer_config.is_object(), "tokenizer_config.json must hold a JSON object");
  return ChatTemplate(template_source(tokenizer_config),
                      special_token_text(tokenizer_config, "bos_token"),
                      special_token_text(tokenizer_config, "eos_token"));
}

std::optional<ChatTemplate> load_chat_template(
    const std::optional<nlohmann::json>& tokenizer_config, const std::filesystem::path& config_file,
    const std::filesystem::path& template_file) {
  const bool has_config = tokenizer_config && tokenizer_config->is_object();
  if (!template_file.empty()) {
    nlohmann::json with_template = has_config ? *tokenizer_config : nlohmann::json::object();
    with_template["chat_template"] = read_text_file(template_file);
    try {
      return chat_template_from_tokenizer_config(with_template);
    } catch (const Error& e) {
      fail("--chat-template {}: {}", template_file.string(), e.what());
    }
  }
  if (!has_config || !tokenizer_config->contains("chat_template")) return std::nullopt;
  try {
    return chat_template_from_tokenizer_config(*tokenizer_config);
  } catch (const Error& e) {
    fail("{}: {}", config_file.string(), e.what());
  }
}

}  // namespace tessera::jinja
