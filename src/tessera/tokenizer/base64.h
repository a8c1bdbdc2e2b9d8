#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera::tokenizer {

// Standard base64 (RFC 4648, '+' '/', '=' padding), as .tiktoken rank files use it.
std::string base64_encode(std::string_view bytes);
// nullopt unless `text` is canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace tessera::tokenizer
