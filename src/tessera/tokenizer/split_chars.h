// The characters the byte-level BPE split patterns tell apart, read from UTF-8 text: shared by
// the hand-coded GPT-2 and Llama 3 patterns.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <string_view>
#include <vector>

#include "tessera/core/utf8.h"
#include "tessera/tokenizer/unicode_classes.h"

namespace tessera::tokenizer::split {

inline constexpr std::array<CharClass, 128> kAsciiClasses = [] {
  std::array<CharClass, 128> classes{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      classes[c] = CharClass::kLetter;
    } else if (c >= '0' && c <= '9') {
      classes[c] = CharClass::kNumber;
    } else if (c == ' ' || (c >= '\t' && c <= '\r')) {
      classes[c] = CharClass::kSpace;
    } else {
      classes[c] = CharClass::kOther;
    }
  }
  return classes;
}();

struct ClassifiedChar {
  CharClass cls;
  int length;
};

// Bytes that are not well-formed UTF-8 count as kOther, one byte each.
inline ClassifiedChar char_at(std::string_view text, size_t pos) {
  const unsigned char byte = text[pos];
  if (byte < 0x80) return {kAsciiClasses[byte], 1};
  const Utf8Char c = decode_utf8(text, pos);
  return {c.code_point == Utf8Char::kInvalidByte ? CharClass::kOther : classify(c.code_point),
          c.length};
}

// The end of the run of `cls` characters from `pos`.
inline size_t run_end(std::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    const ClassifiedChar c = char_at(text, pos);
    if (c.cls != cls) break;
    pos += c.length;
  }
  return pos;
}

inline bool is_ascii_space(unsigned char byte) {
  return byte < 0x80 && kAsciiClasses[byte] == CharClass::kSpace;
}

// "\s+(?!\S)|\s+" from `pos`, a whitespace character: a whitespace run followed by text gives
// its last character to the next piece (typically a space that leads a word), unless the run is
// that one character.
inline size_t whitespace_piece_end(std::string_view text, size_t pos) {
  size_t last = pos, end = pos;
  while (end < text.size()) {
    const ClassifiedChar c = char_at(text, end);
    if (c.cls != CharClass::kSpace) break;
    last = end;
    end += c.length;
  }
  return end == text.size() || last == pos ? end : last;
}

// Offsets 0 = c[0] < ... < c.back() = text.size() cutting the text into at most `parts`
// near-equal ranges at positions where `safe(text, p)` holds.
template <typename Safe>
std::vector<size_t> cut_points(std::string_view text, size_t parts, Safe&& safe) {
  std::vector<size_t> cuts = {0};
  for (size_t i = 1; i < parts; ++i) {
    size_t p = std::max(cuts.back() + 1, text.size() * i / parts);
    while (p < text.size() && !safe(text, p)) ++p;
    if (p >= text.size()) break;
    cuts.push_back(p);
  }
  if (!text.empty()) cuts.push_back(text.size());
  return cuts;
}

}  // namespace tessera::tokenizer::split
