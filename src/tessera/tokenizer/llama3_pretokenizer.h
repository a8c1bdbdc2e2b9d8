#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace tessera::tokenizer {

// Llama 3's pre-tokenisation (tiktoken's cl100k pattern, as its tokenizer.json writes it):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
//   \s*[\r\n]+|\s+(?!\S)|\s+
// hand-coded as gpt2_pretokenizer.h codes GPT-2's: a letter run takes one leading character
// that is neither a letter, a digit nor a line break; digits go in threes; punctuation keeps the
// line breaks after it; a whitespace run with a line break ends after its last one.
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The end of the piece that starts at `pos` (< text.size()).
size_t llama3_piece_end(std::string_view text, size_t pos);

// As gpt2_cut_points, for this pattern.
std::vector<size_t> llama3_cut_points(std::string_view text, size_t parts);

}  // namespace tessera::tokenizer
