// Hugging Face's tokenizer.json for byte-level BPE: GPT-2's (a ByteLevel pre-tokenizer with its
// own split) and Llama 3's (a Split on tiktoken's cl100k pattern before a ByteLevel one). The
// vocabulary and merges are written through GPT-2's byte-to-unicode table; added_tokens are
// special tokens, never merged into and never recognised in text. Anything that would change how
// text encodes and that this reader does not implement (a normalizer, another model type or
// split, dropout, a word prefix or suffix, byte fallback) is refused by name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::tokenizer {

inline constexpr char kHfTokenizerFile[] = "tokenizer.json";
// Beside it: the special tokens' roles and the chat template, which a copy of the tokenizer keeps.
inline constexpr char kHfTokenizerConfigFile[] = "tokenizer_config.json";

// Errors name `source` and the part of the file at fault.
BpeVocab parse_hf_tokenizer(std::string_view json, const std::string& source);

// The tokenizer.json of `vocab`, which parse_hf_tokenizer reads back and Transformers'
// PreTrainedTokenizerFast loads. Merges that share a rank (a rank file's several splits of one
// token) are listed in rank order and read back one rank apart, as Llama 3's tiktoken-derived
// file has them; the two differ only where two splits of one token overlap within a piece.
std::string format_hf_tokenizer(const BpeVocab& vocab);

// Writes what a Hugging Face model folder carries of its tokenizer into `dir`: tokenizer.json,
// tokenizer_config.json (the fast tokenizer class, its special tokens, the context length) and
// generation_config.json (bos and eos ids: the document separator, and <|begin_of_text|> where
// the vocabulary has it).
void write_hf_tokenizer_files(const BpeVocab& vocab, int64_t max_seq,
                              const std::filesystem::path& dir);

}  // namespace tessera::tokenizer
