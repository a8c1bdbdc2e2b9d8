#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::tokenizer {

// Two adjacent tokens that merge into `result`. Lower ranks merge first; merges may share a
// rank (a rank file lets several splits of one token merge into it at the same priority).
struct BpeMerge {
  int32_t left;
  int32_t right;
  int32_t result;
  int32_t rank;
};

// One key for an adjacent pair of ids, as the merge tables index them.
inline uint64_t merge_pair_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}

// How text is cut into pieces before merges run inside each: GPT-2's pattern
// (gpt2_pretokenizer.h) or Llama 3's (llama3_pretokenizer.h).
enum class SplitPattern { kGpt2, kLlama3 };

// A byte-level BPE vocabulary as its files describe it, in one shape for every format.
struct BpeVocab {
  SplitPattern pattern = SplitPattern::kGpt2;
  std::vector<std::string> tokens;  // id -> bytes; an empty string marks an unused id
  std::vector<BpeMerge> merges;
  std::vector<std::pair<std::string, int32_t>> special_tokens;  // text -> id, never merged into
};

inline constexpr char kEndOfText[] = "<|endoftext|>";
// Llama 3's name for the same document separator.
inline constexpr char kLlama3EndOfText[] = "<|end_of_text|>";
// Far above any real vocabulary, low enough that a corrupt file cannot demand gigabytes.
inline constexpr int32_t kMaxTokenId = (1 << 22) - 1;

// The special tokens that begin and end a document: the document separator ends one, and begins
// one too unless the vocabulary has Llama 3's <|begin_of_text|>.
struct SpecialToken {
  std::string text;
  int32_t id;
};
struct DocumentTokens {
  std::optional<SpecialToken> bos, eos;
};
DocumentTokens document_tokens(const BpeVocab& vocab);

// The merges a rank file implies. tiktoken merges two adjacent parts whenever their
// concatenation is a token, at that token's rank, so every split of a token into two tokens
// is a merge.
std::vector<BpeMerge> merges_from_ranks(const std::vector<std::string>& tokens);

}  // namespace tessera::tokenizer
