// Bytes as ids 0-255, then special tokens from id 256: the end-of-text token <|endoftext|> and
// any others given. A dataset's tokens spell out its text, for tests of what prepare writes.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tessera/tokenizer/byte_tokenizer.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::testing {

class ByteSpecialTokenizer final : public tokenizer::Tokenizer {
 public:
  explicit ByteSpecialTokenizer(const std::vector<std::string>& more_specials = {}) {
    specials_.emplace_back("<|endoftext|>", 256);
    for (const std::string& s : more_specials) {
      specials_.emplace_back(s, int32_t(256 + specials_.size()));
    }
  }
  std::vector<int32_t> encode(std::string_view text) const override {
    return tokenizer::ByteTokenizer().encode(text);
  }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (const int32_t id : ids)
      text += id < 256 ? std::string(1, char(id)) : specials_[id - 256].first;
    return text;
  }
  int64_t vocab_size() const override { return 256 + int64_t(specials_.size()); }
  std::optional<int32_t> end_of_text() const override { return 256; }
  std::string kind() const override { return "test-byte-special"; }
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const override {
    return specials_;
  }

 private:
  std::vector<std::pair<std::string, int32_t>> specials_;
};

}  // namespace tessera::testing
