// Chat examples for fine-tuning, one JSON object per line of a JSONL file: a conversation in
// OpenAI's shape ({"messages": [{"role": ..., "content": ...}, ...]}, with optional "tools"), or a
// prompt and its completion ({"prompt": ..., "completion": ...}, both text or both lists of
// messages). A conversation renders through the model's chat template; each example becomes
// tokens and a loss mask that trains on the assistant's turns (the completion) and not on the
// rest, which the model reads as context.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tessera/core/enum_names.h"
#include "tessera/jinja/chat_template.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::data {

// Which tokens of an example the loss counts.
enum class ChatLoss { kAssistant, kAll };
inline constexpr EnumName<ChatLoss> kChatLossNames[] = {{ChatLoss::kAssistant, "assistant"},
                                                        {ChatLoss::kAll, "all"}};
constexpr const auto& enum_names(ChatLoss) { return kChatLossNames; }

struct ChatExample {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;  // [tokens]: 1 where the token is a trained target
  int64_t bytes = 0;             // of the text the tokens encode
};

// Most nesting a line's JSON may have.
inline constexpr int64_t kMaxChatLineDepth = 32;

// One JSONL line as tokens and loss mask. Conversations render through chat_template (a text
// prompt and completion are taken as they are); every turn the loss counts must render as a
// continuation of the turns before it. An Error names what is wrong with the line.
ChatExample encode_chat_example(std::string_view line, const jinja::ChatTemplate& chat_template,
                                const tokenizer::Tokenizer& tokenizer, ChatLoss loss);

}  // namespace tessera::data
