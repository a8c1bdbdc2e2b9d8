// Hugging Face's tokenizer.json for byte-level BPE: GPT-2's (a ByteLevel pre-tokenizer with its
// own split) and Llama 3's (a Split on tiktoken's cl100k pattern before a ByteLevel one). The
// vocabulary and merges are written through GPT-2's byte-to-unicode table; added_tokens are
// special tokens, never merged into and never recognised in text. Anything that would change how
// text encodes and that this reader does not implement (a normalizer, another model type or
// split, dropout, a word prefix or suffix, byte fallback) is refused by name.
#pragma once

#include <string>
#include <string_view>

#include "tessera/data/bpe_vocab.h"

namespace tessera::data {

inline constexpr char kHfTokenizerFile[] = "tokenizer.json";

// Errors name `source` and the part of the file at fault.
BpeVocab parse_hf_tokenizer(std::string_view json, const std::string& source);

}  // namespace tessera::data
