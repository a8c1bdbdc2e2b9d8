#include "tessera/serve/response_formats.h"

#include <algorithm>

#include "tessera/tokenizer/token_table.h"

namespace tessera::serve {

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
    vocabulary_ =
        std::make_shared<grammar::Vocabulary>(tokenizer::token_bytes(tokenizer_, vocab_size_));
  }
  used_.emplace_front(key, std::make_shared<grammar::TokenGrammar>(grammar, vocabulary_));
  if (int64_t(used_.size()) > kMaxFormats) used_.pop_back();
  return used_.front().second;
}

}  // namespace tessera::serve
