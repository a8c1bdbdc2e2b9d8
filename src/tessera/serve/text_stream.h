#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/tokenizer/tokenizer.h"

namespace tessera::serve {

// Turns generated tokens, one at a time, into text that is safe to send to a client at once.
// A token may end inside a UTF-8 character, and text may turn out to begin a stop string, so
// both are held back until the next tokens settle them. Released text is always valid UTF-8:
// bytes that cannot form a character become U+FFFD, one per maximal ill-formed sequence.
class TextStream {
 public:
  static constexpr size_t kMaxStopStrings = 8;  // OpenAI's 4, plus the chat template's own

  // Throws an Error for more than kMaxStopStrings stop strings, or one that is empty or not
  // valid UTF-8. The tokenizer must outlive the stream.
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop);

  // Returns the text this token releases, valid until the next call: empty while everything is
  // held back, and for every token once a stop string has appeared. When one appears, the text
  // before it is released, and it and everything after it are dropped.
  std::string_view push(int32_t token);
  // Ends the stream: releases all that is held back, an incomplete character as U+FFFD.
  std::string_view finish();

  bool stopped() const { return stopped_; }
  // Everything released so far, for a response that is not streamed.
  const std::string& text() const { return text_; }

 private:
  void decode(bool final);
  void release(bool final);
  size_t stop_prefix_length() const;

  const tokenizer::Tokenizer* tokenizer_;
  std::vector<std::string> stop_;
  std::string undecoded_;  // the start of a character whose remaining bytes may still come
  std::string held_;       // valid UTF-8 whose end may begin a stop string
  std::string text_;
  bool stopped_ = false;
};

}  // namespace tessera::serve
