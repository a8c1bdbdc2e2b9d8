#include "tessera/serve/text_stream.h"

#include <algorithm>
#include <span>

#include "tessera/core/error.h"
#include "tessera/core/utf8.h"

namespace tessera::serve {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// The bytes from pos that are a well-formed UTF-8 character (complete) or the longest start of
// one, which Unicode's substitution practice replaces by one U+FFFD; length 0 when the byte at
// pos can start no character.
struct Utf8Prefix {
  size_t length;
  bool complete;
};

Utf8Prefix utf8_prefix(std::string_view text, size_t pos) {
  const auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return {1, true};
  size_t need;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range excludes overlong forms,
  if (lead >= 0xC2 && lead <= 0xDF) {     // surrogates and code points beyond U+10FFFF
    need = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return {0, false};
  }
  size_t length = 1;
  while (length < need && pos + length < text.size()) {
    const auto next = static_cast<unsigned char>(text[pos + length]);
    if (next < low || next > high) break;
    low = 0x80, high = 0xBF;
    ++length;
  }
  return {length, length == need};
}

bool valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Prefix c = utf8_prefix(text, pos);
    if (!c.complete) return false;
    pos += c.length;
  }
  return true;
}

}  // namespace

TextStream::TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop)
    : tokenizer_(&tokenizer), stop_(std::move(stop)) {
  check(stop_.size() <= kMaxStopStrings, "stop holds {} strings; at most {} are allowed",
        stop_.size(), kMaxStopStrings);
  for (size_t i = 0; i < stop_.size(); ++i) {
    check(!stop_[i].empty(), "stop string {} of {} is empty; each needs at least one character",
          i + 1, stop_.size());
    check(valid_utf8(stop_[i]), "stop string '{}' is not valid UTF-8", printable(stop_[i]));
  }
}

std::string_view TextStream::push(int32_t token) {
  if (stopped_) return {};
  const size_t from = text_.size();
  undecoded_ += tokenizer_->decode(std::span<const int32_t>(&token, 1));
  decode(/*final=*/false);
  release(/*final=*/false);
  return std::string_view(text_).substr(from);
}

std::string_view TextStream::finish() {
  if (stopped_) return {};
  const size_t from = text_.size();
  decode(/*final=*/true);
  release(/*final=*/true);
  return std::string_view(text_).substr(from);
}

// Moves the complete characters of undecoded_ to held_, and bytes that can no longer become
// one as U+FFFD; unless final, an incomplete character at the end waits for the next token.
void TextStream::decode(bool final) {
  size_t pos = 0;
  while (pos < undecoded_.size()) {
    const Utf8Prefix c = utf8_prefix(undecoded_, pos);
    if (c.complete) {
      held_.append(undecoded_, pos, c.length);
    } else if (c.length > 0 && pos + c.length == undecoded_.size() && !final) {
      break;
    } else {
      held_ += kReplacement;
    }
    pos += std::max<size_t>(c.length, 1);
  }
  undecoded_.erase(0, pos);
}

// Moves held_ to text_, up to the first stop string (then the stream stops) or, unless final, up
// to a tail that may still grow into one.
void TextStream::release(bool final) {
  size_t stop_at = std::string::npos;
  for (const std::string& s : stop_) stop_at = std::min(stop_at, held_.find(s));
  if (stop_at != std::string::npos) {
    text_.append(held_, 0, stop_at);
    held_.clear();
    undecoded_.clear();
    stopped_ = true;
    return;
  }
  const size_t ready = held_.size() - (final ? 0 : stop_prefix_length());
  text_.append(held_, 0, ready);
  held_.erase(0, ready);
}

// The longest end of held_ that is a proper prefix of a stop string. Stop strings are valid
// UTF-8, so it starts on a character boundary.
size_t TextStream::stop_prefix_length() const {
  const std::string_view held = held_;
  size_t longest = 0;
  for (const std::string& s : stop_) longest = std::max(longest, s.size());
  for (size_t length = std::min(held.size(), longest); length > 0; --length) {
    const std::string_view tail = held.substr(held.size() - length);
    for (const std::string& s : stop_) {
      if (s.size() > length && std::string_view(s).starts_with(tail)) return length;
    }
  }
  return 0;
}

}  // namespace tessera::serve
