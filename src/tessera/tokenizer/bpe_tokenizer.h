#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tessera/tokenizer/bpe_vocab.h"
#include "tessera/tokenizer/token_index.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::tokenizer {

// Byte-level BPE with GPT-2's or Llama 3's pre-tokenisation, encoding exactly as tiktoken does:
// each piece that is a token as a whole is that token; otherwise its bytes merge pairwise, lowest
// rank first and leftmost among equal ranks. encode() never recognises special tokens in text (text
// that spells "<|endoftext|>" encodes as ordinary characters); callers insert end_of_text()
// themselves, so a document cannot forge a separator.
class BpeTokenizer final : public Tokenizer {
 public:
  // `source` names the files the vocabulary came from, for errors about its consistency.
  BpeTokenizer(BpeVocab vocab, std::string kind, const std::string& source);
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  // Texts of kParallelMinBytes or more are cut at safe piece boundaries and encoded on all
  // OpenMP threads; the ids are the same as on one thread.
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return int64_t(tokens_.size()); }
  std::optional<int32_t> end_of_text() const override { return end_of_text_; }
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const override {
    return special_tokens_;
  }
  std::string kind() const override { return kind_; }

  static constexpr size_t kParallelMinBytes = 256 << 10;

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t result;
  };

  void encode_serial(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void merge_bytes(std::string_view piece, std::vector<int32_t>& out) const;

  std::string kind_;
  SplitPattern pattern_;
  std::vector<std::string> tokens_;  // id -> bytes, special tokens' text included
  std::vector<bool> is_valid_id_;
  TokenIndex mergeable_ids_;
  std::unordered_map<uint64_t, MergeTarget> merges_;  // (left << 32 | right) -> merge
  int32_t byte_ids_[256];
  std::optional<int32_t> end_of_text_;
  std::vector<std::pair<std::string, int32_t>> special_tokens_;
  uint64_t cache_owner_;  // tells this tokenizer's entries apart in the per-thread piece cache
};

}  // namespace tessera::tokenizer
