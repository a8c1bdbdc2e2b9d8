#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

// A .tiktoken rank file: one line per token, "<base64 bytes> <rank>", where the rank is both
// the token id and its merge priority. Returns id -> bytes (an empty string for an unused
// rank). Errors name `source` and the line.
std::vector<std::string> parse_tiktoken_ranks(std::string_view text, const std::string& source);

// The rank file for id -> bytes, unused ids left out.
std::string format_tiktoken_ranks(const std::vector<std::string>& tokens);

}  // namespace tessera::data
