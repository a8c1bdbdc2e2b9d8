// A chat template comes with a downloaded model and its messages from any client: any template
// text and any conversation must render or fail with an Error, bounded in depth, loop iterations
// and output, never anything else. The input is the template, a NUL byte, then the messages JSON.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/jinja/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find('\0');
  const std::string_view source = input.substr(0, split);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  if (split != std::string_view::npos) {
    messages = nlohmann::ordered_json::parse(input.substr(split + 1), nullptr, false);
  }
  try {
    const tessera::jinja::ChatTemplate chat(source, "<s>", "</s>");
    chat.render(messages, true);
    chat.render(messages, false);
  } catch (const tessera::Error&) {
  }
  return 0;
}
