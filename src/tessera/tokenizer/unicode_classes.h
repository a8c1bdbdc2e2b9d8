#pragma once

#include <cstdint>

namespace tessera::tokenizer {

// The character classes the GPT-2 split pattern distinguishes: \p{L}, \p{N}, \s (as JavaScript
// defines it, the engine the reference tokenisers run on) and everything else.
enum class CharClass : uint8_t { kOther, kLetter, kNumber, kSpace };

CharClass classify(char32_t code_point);

}  // namespace tessera::tokenizer
