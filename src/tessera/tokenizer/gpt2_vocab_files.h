#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>

#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::tokenizer {

// GPT-2's own vocabulary files. encoder.json maps each token to its id, the token's bytes
// written through GPT-2's byte-to-unicode table (every byte a printable character, a space
// as 'Ġ'); its "<|endoftext|>" entry is the special token. vocab.bpe lists the merges in rank
// order, "left right" on each line, after an optional "#version" line. Errors name the file
// and, in vocab.bpe, the line.
// Bytes written through GPT-2's byte-to-unicode table, as its files spell tokens (a space as
// 'Ġ'): every byte one printable character.
std::string map_gpt2_bytes(std::string_view bytes);

// A vocabulary whose tokens are written through GPT-2's byte-to-unicode table, as GPT-2's files
// and Hugging Face's tokenizer.json write them: the token -> id object first, then the merges in
// rank order. Errors name `source` (the vocabulary's file) or a merge's `where`.
class Gpt2VocabBuilder {
 public:
  // Keys listed in `special` are special tokens, kept as they are written.
  Gpt2VocabBuilder(const nlohmann::json& encoder, const std::string& source,
                   const std::set<std::string>& special);
  void add_merge(std::string_view left, std::string_view right, const std::string& where);
  BpeVocab take() { return std::move(vocab_); }

 private:
  std::optional<int32_t> id_of(std::string_view mapped) const;

  std::string source_;
  BpeVocab vocab_;
  std::unordered_map<std::string, int32_t> ids_;  // bytes -> id
};

BpeVocab parse_gpt2_vocab(std::string_view encoder_json, const std::string& encoder_source,
                          std::string_view vocab_bpe, const std::string& bpe_source);

}  // namespace tessera::tokenizer
