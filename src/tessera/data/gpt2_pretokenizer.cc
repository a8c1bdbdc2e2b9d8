#include "tessera/data/gpt2_pretokenizer.h"

#include <array>

#include "tessera/data/unicode_classes.h"
#include "tessera/core/utf8.h"

namespace tessera::data {
namespace {

constexpr std::array<CharClass, 128> kAsciiClasses = [] {
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

inline ClassifiedChar char_at(std::string_view text, size_t pos) {
  const unsigned char byte = text[pos];
  if (byte < 0x80) return {kAsciiClasses[byte], 1};
  const Utf8Char c = decode_utf8(text, pos);
  return {c.code_point == Utf8Char::kInvalidByte ? CharClass::kOther : classify(c.code_point),
          c.length};
}

size_t run_end(std::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    const ClassifiedChar c = char_at(text, pos);
    if (c.cls != cls) break;
    pos += c.length;
  }
  return pos;
}

size_t contraction_end(std::string_view text, size_t pos) {
  const std::string_view rest = text.substr(pos + 1);
  if (rest.empty()) return pos;
  if (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd') return pos + 2;
  if (rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll")) return pos + 3;
  return pos;
}

bool is_ascii_space(unsigned char byte) {
  return byte < 0x80 && kAsciiClasses[byte] == CharClass::kSpace;
}

}  // namespace

size_t gpt2_piece_end(std::string_view text, size_t pos) {
  // The alternatives in the pattern's order; the first that matches at `pos` wins.
  if (text[pos] == '\'') {
    if (size_t end = contraction_end(text, pos); end != pos) return end;
  }
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": one space may lead a run of one class.
  if (text[pos] == ' ' && pos + 1 < text.size()) {
    const CharClass next = char_at(text, pos + 1).cls;
    if (next != CharClass::kSpace) return run_end(text, pos + 1, next);
  }
  const ClassifiedChar first = char_at(text, pos);
  if (first.cls != CharClass::kSpace) return run_end(text, pos, first.cls);
  // "\s+(?!\S)" backtracks one character off a whitespace run that is followed by text, leaving
  // that character (typically the space) to lead the next piece; a lone whitespace character
  // before text falls through to "\s+".
  size_t last = pos, end = pos;
  while (end < text.size()) {
    const ClassifiedChar c = char_at(text, end);
    if (c.cls != CharClass::kSpace) break;
    last = end;
    end += c.length;
  }
  return end == text.size() || last == pos ? end : last;
}

// A cut at p is safe when text[p-1] is an ASCII non-space and text[p] ASCII whitespace:
//  - no piece spans p, because the only pieces mixing whitespace and non-whitespace start with
//    one space followed by non-space (whitespace before, never after, the non-space);
//  - pieces after p are the same, because each match depends only on the text from its start;
//  - pieces before p are the same, because the only look beyond a piece's end is the run
//    continuation and "(?!\S)", and no run can cross from the non-space at p-1 into the space
//    at p, while no whitespace piece ends at p (p-1 is not whitespace);
//  - UTF-8 decoding before p is unchanged, since an ASCII byte at p-1 ends any multi-byte
//    sequence before it.
std::vector<size_t> gpt2_cut_points(std::string_view text, size_t parts) {
  std::vector<size_t> cuts = {0};
  for (size_t i = 1; i < parts; ++i) {
    size_t p = std::max(cuts.back() + 1, text.size() * i / parts);
    while (p < text.size() && !(is_ascii_space(text[p]) && !is_ascii_space(text[p - 1]) &&
                                static_cast<unsigned char>(text[p - 1]) < 0x80)) {
      ++p;
    }
    if (p >= text.size()) break;
    cuts.push_back(p);
  }
  if (!text.empty()) cuts.push_back(text.size());
  return cuts;
}

}  // namespace tessera::data
