// A tokenizer's table of ids and the bytes each stands for, and the check that two tokenizers
// share it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizer/tokenizer.h"

namespace tessera::tokenizer {

// Each token id's bytes, empty for special tokens and ids the tokenizer lacks.
std::vector<std::string> token_bytes(const Tokenizer& tokenizer, int64_t vocab_size);

// Throws unless tokenizer `a` is `b`: the same ids for the same bytes (an id one of them lacks is
// no token to the other either), special tokens included. The error calls them the tokenizers
// of a_owner and b_owner ("the draft model", "the served model").
void check_same_tokenizer(const Tokenizer& a, std::string_view a_owner, const Tokenizer& b,
                          std::string_view b_owner);

}  // namespace tessera::tokenizer
