#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "tessera/grammar/token_masks.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::serve {

// The grammars of response formats bound to the served model's vocabulary, kept for the
// kMaxFormats formats used last, so requests with the same schema share one grammar's token
// masks. The vocabulary's tables are built on the first use.
class ResponseFormats {
 public:
  static constexpr int64_t kMaxFormats = 32;

  ResponseFormats(const tokenizer::Tokenizer& tokenizer, int64_t vocab_size)
      : tokenizer_(tokenizer), vocab_size_(vocab_size) {}

  // The bound grammar of the format named `key`, compiled to `grammar`.
  std::shared_ptr<grammar::TokenGrammar> bind(const std::string& key,
                                              const grammar::JsonGrammar& grammar);

 private:
  const tokenizer::Tokenizer& tokenizer_;
  const int64_t vocab_size_;
  std::mutex mutex_;
  std::shared_ptr<const grammar::Vocabulary> vocabulary_;
  std::list<std::pair<std::string, std::shared_ptr<grammar::TokenGrammar>>> used_;  // last first
};

}  // namespace tessera::serve
