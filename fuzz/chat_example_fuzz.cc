// A chat example is a line of a dataset file anyone may have written: any line must become tokens
// and a loss mask or fail with an Error, bounded in depth, never anything else.
#include <cstdint>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/data/chat_examples.h"
#include "tessera/jinja/chat_template.h"
#include "tessera/tokenizer/byte_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tessera::jinja::ChatTemplate chatml(
      "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
      "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
      "", "<|endoftext|>");
  static const tessera::tokenizer::ByteTokenizer bytes;
  const std::string_view line(reinterpret_cast<const char*>(data), size);
  try {
    tessera::data::encode_chat_example(line, chatml, bytes, tessera::data::ChatLoss::kAssistant);
  } catch (const tessera::Error&) {
  }
  return 0;
}
