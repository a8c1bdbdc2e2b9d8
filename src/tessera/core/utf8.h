#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

// One character read from UTF-8 text. Text may hold any bytes, so a byte that does not start a
// well-formed sequence (stray continuation, overlong form, surrogate, beyond U+10FFFF,
// truncated) is read on its own as kInvalidByte: nothing is ever skipped or replaced.
struct Utf8Char {
  static constexpr char32_t kInvalidByte = 0xFFFFFFFF;
  char32_t code_point;
  int length;  // bytes, 1 to 4
};

Utf8Char decode_utf8(std::string_view text, size_t pos);

// The text with every byte that is not part of well-formed, printable UTF-8 written as \xNN,
// so a path or token can be quoted in a one-line error message.
std::string printable(std::string_view text);

}  // namespace tessera
