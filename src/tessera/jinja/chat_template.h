// A model's chat template: the Jinja template of its tokenizer_config.json and the special tokens
// it refers to, which turn a conversation into the prompt text the model learned from. Rendering
// passes the template what transformers' apply_chat_template passes it.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tessera/jinja/template.h"

namespace tessera::jinja {

class ChatTemplate {
 public:
  // Parses the template; an Error names the line and column of what is wrong in it.
  ChatTemplate(std::string_view source, std::string bos_token, std::string eos_token);

  // The prompt for `messages` ([{"role": ..., "content": ...}, ...]), ending with the opening of
  // the assistant's turn when add_generation_prompt is set. `extra` holds more variables for the
  // template (tools, documents, date_string, ...), which replace the defaults. An Error carries
  // the message of the template's raise_exception(), such as roles that do not alternate.
  std::string render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  // The variables render() gives the template: messages, add_generation_prompt, bos_token,
  // eos_token, and tools and documents as none (as transformers passes them), then `extra`.
  nlohmann::ordered_json context(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

 private:
  jinja::JinjaTemplate template_;
  std::string bos_token_;
  std::string eos_token_;
};

// The chat template of a tokenizer_config.json: "chat_template" holds the template, or a list of
// {"name", "template"} of which the one named "default" is taken; bos_token and eos_token are
// strings or {"content": ...} objects, and a missing one is empty. An Error when the config has
// no chat template.
ChatTemplate chat_template_from_tokenizer_config(const nlohmann::json& tokenizer_config);

// The text of tokenizer_config.json's special token `key` ("bos_token", "eos_token"): a string or
// a {"content": ...} object; empty when absent. Any other form is an Error.
std::string special_token_text(const nlohmann::json& tokenizer_config, const char* key);

// The chat template a model is used with: the text of template_file when one is given, with the
// special tokens of tokenizer_config (which may be absent), else the config's own template;
// nullopt when neither gives one. An Error names the file at fault (config_file for the config).
std::optional<ChatTemplate> load_chat_template(
    const std::optional<nlohmann::json>& tokenizer_config, const std::filesystem::path& config_file,
    const std::filesystem::path& template_file);

}  // namespace tessera::jinja
