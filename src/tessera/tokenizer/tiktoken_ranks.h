#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::tokenizer {

// A .tiktoken rank file: one line per token, "<base64 bytes> <rank>", where the rank is both
// the token id and its merge priority. Returns the tokens (id -> bytes, an empty string for an
// unused rank) and the merges they imply (merges_from_ranks). The file carries no checksum, so
// its structure is checked instead, which catches most changed bytes: tokens are unique, ranks
// 0-255 are single bytes, and every later token is two tokens of lower rank joined, as the merge
// that made it joined them. Errors name `source` and the line.
BpeVocab parse_tiktoken_ranks(std::string_view text, const std::string& source);

// The rank file for id -> bytes, unused ids left out.
std::string format_tiktoken_ranks(const std::vector<std::string>& tokens);

}  // namespace tessera::tokenizer
