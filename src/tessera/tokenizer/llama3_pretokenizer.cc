#include "tessera/tokenizer/llama3_pretokenizer.h"

#include "tessera/tokenizer/split_chars.h"

namespace tessera::tokenizer {
namespace {

using split::char_at;
using split::ClassifiedChar;
using split::run_end;

char lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

// (?i:'s|'t|'re|'ve|'m|'ll|'d) at `pos`, a quote: its end, or `pos` when none matches.
size_t caseless_contraction_end(std::string_view text, size_t pos) {
  const auto at = [&](size_t i) { return pos + i < text.size() ? lower(text[pos + i]) : '\0'; };
  const char first = at(1), second = at(2);
  if (first == 's' || first == 't' || first == 'm' || first == 'd') return pos + 2;
  if ((first == 'r' && second == 'e') || (first == 'v' && second == 'e') ||
      (first == 'l' && second == 'l')) {
    return pos + 3;
  }
  return pos;
}

bool is_line_break(char c) { return c == '\r' || c == '\n'; }

size_t number_end(std::string_view text, size_t pos) {
  for (int digits = 0; digits < 3 && pos < text.size(); ++digits) {
    const ClassifiedChar c = char_at(text, pos);
    if (c.cls != CharClass::kNumber) break;
    pos += c.length;
  }
  return pos;
}

}  // namespace

size_t llama3_piece_end(std::string_view text, size_t pos) {
  // The alternatives in the pattern's order; the first that matches at `pos` wins.
  if (text[pos] == '\'') {
    if (size_t end = caseless_contraction_end(text, pos); end != pos) return end;
  }
  const ClassifiedChar first = char_at(text, pos);
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (first.cls == CharClass::kLetter) return run_end(text, pos, CharClass::kLetter);
  const size_t second = pos + first.length;
  if (first.cls != CharClass::kNumber && !is_line_break(text[pos]) && second < text.size() &&
      char_at(text, second).cls == CharClass::kLetter) {
    return run_end(text, second, CharClass::kLetter);
  }
  // \p{N}{1,3}
  if (first.cls == CharClass::kNumber) return number_end(text, pos);
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  size_t others = first.cls == CharClass::kOther ? pos : std::string_view::npos;
  if (text[pos] == ' ' && second < text.size() && char_at(text, second).cls == CharClass::kOther) {
    others = second;
  }
  if (others != std::string_view::npos) {
    size_t end = run_end(text, others, CharClass::kOther);
    while (end < text.size() && is_line_break(text[end])) ++end;
    return end;
  }
  // \s*[\r\n]+: a whitespace run holding a line break ends after its last line break.
  const size_t run = run_end(text, pos, CharClass::kSpace);
  for (size_t i = run; i > pos; --i) {
    if (is_line_break(text[i - 1])) return i;
  }
  return split::whitespace_piece_end(text, pos);
}

// A cut at p is safe when text[p-1] is an ASCII letter or digit and text[p] a space: the piece
// holding p-1 is a letter run, a group of digits or a contraction, each of which ends at the
// space and looks no further; the space starts a piece whatever came before; and an ASCII byte at
// p-1 ends any multi-byte sequence before it.
std::vector<size_t> llama3_cut_points(std::string_view text, size_t parts) {
  return split::cut_points(text, parts, [](std::string_view t, size_t p) {
    const unsigned char before = t[p - 1];
    return t[p] == ' ' && before < 0x80 && split::kAsciiClasses[before] != CharClass::kSpace &&
           split::kAsciiClasses[before] != CharClass::kOther;
  });
}

}  // namespace tessera::tokenizer
