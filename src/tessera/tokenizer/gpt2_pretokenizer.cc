#include "tessera/tokenizer/gpt2_pretokenizer.h"

#include "tessera/tokenizer/split_chars.h"

namespace tessera::tokenizer {
namespace {

using split::char_at;
using split::ClassifiedChar;
using split::is_ascii_space;
using split::run_end;

size_t contraction_end(std::string_view text, size_t pos) {
  const std::string_view rest = text.substr(pos + 1);
  if (rest.empty()) return pos;
  if (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd') return pos + 2;
  if (rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll")) return pos + 3;
  return pos;
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
  return split::whitespace_piece_end(text, pos);
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
  return split::cut_points(text, parts, [](std::string_view t, size_t p) {
    return is_ascii_space(t[p]) && !is_ascii_space(t[p - 1]) &&
           static_cast<unsigned char>(t[p - 1]) < 0x80;
  });
}

}  // namespace tessera::tokenizer
