#include "tessera/serve/response_formats.h"

#include <algorithm>

namespace tessera::serve {

std::vector<std::string> token_bytes(const tokenizer::Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  std::vector<bool> special(static_cast<size_t>(vocab_size));
  for (const auto& [text, id] : tokenizer.special_tokens()) {
    if (id >= 0 && id < vocab_size) special[size_t(id)] = true;
  }
  if (const auto end = tokenizer.end_of_text(); end && *end < vocab_size)
    special[size_t(*end)] = true;
  for (int32_t id = 0; id < int32_t(std::min(vocab_size, tokenizer.vocab_size())); ++id) {
    if (special[size_t(id)]) continue;
    try {
      bytes[size_t(id)] = tokenizer.decode(std::span<const int32_t>(&id, 1));
    } catch (const Error&) {  // an id with no token: never generated under a grammar
    }
  }
  return bytes;
}

std::shared_ptr<grammar::TokenGrammar> ResponseFormats::bind(const std::string& key,
                                                             const grammar::JsonGrammar& grammar) {
  std::lock_guard lock(mutex_);
  const auto found =
      std::find_if(used_.begin(), used_.end(), [&](const auto& u) { return u.first == key; });
  if (found != used_.end()) {
    used_.splice(used_.begin(), used_, found);
    return used_.front().second;
  }
  if (!vocabulary_) {
    vocabulary_ = std::make_shared<grammar::Vocabulary>(token_bytes(tokenizer_, vocab_size_));
  }
  used_.emplace_front(key, std::make_shared<grammar::TokenGrammar>(grammar, vocabulary_));
  if (int64_t(used_.size()) > kMaxFormats) used_.pop_back();
  return used_.front().second;
}

}  // namespace tessera::serve
