// The data layer: tokenizers, corpus reading, train/validation splits and the batch samplers the
// trainer draws from. It reads files and produces token ids; it must never know about models,
// kernels or parallelism, and the samplers it hands the trainer must never allocate.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizer/tokenizer.h"

namespace tessera::tokenizer {

// Each byte is its own token, so any input (binary, invalid UTF-8, NUL) round-trips exactly.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int kVocabSize = 256;

  std::vector<int32_t> encode(std::string_view text) const override;
  // Throws an Error naming the first id outside [0, kVocabSize).
  std::string decode(std::span<const int32_t> ids) const override;
  int64_t vocab_size() const override { return kVocabSize; }
  std::optional<int32_t> end_of_text() const override { return std::nullopt; }
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const override {
    static const std::vector<std::pair<std::string, int32_t>> kNone;
    return kNone;
  }
  std::string kind() const override { return "byte"; }
};

}  // namespace tessera::tokenizer
