#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace tessera::tokenizer {

// GPT-2's pre-tokenisation cuts text into pieces with the pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// and byte-pair merges then run inside each piece. This is that pattern hand-coded, piece for
// piece what JavaScript's regex engine finds (the reference tokenisers are JavaScript), and
// several times faster than a regex engine. Bytes that are not well-formed UTF-8 count as
// [^\s\p{L}\p{N}], one byte each, so every byte string splits and round-trips.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The end of the piece that starts at `pos` (< text.size()).
size_t gpt2_piece_end(std::string_view text, size_t pos);

template <typename Fn>
void for_each_gpt2_piece(std::string_view text, Fn&& fn) {
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = gpt2_piece_end(text, pos);
    fn(text.substr(pos, end - pos));
    pos = end;
  }
}

// Offsets 0 = c[0] < c[1] < ... < c.back() = text.size() that cut the text into at most `parts`
// near-equal ranges (none for empty text), each of which splits into exactly the pieces the
// whole text has there.
std::vector<size_t> gpt2_cut_points(std::string_view text, size_t parts);

}  // namespace tessera::tokenizer
