#include "tessera/tokenizer/token_table.h"

#include <fmt/format.h>

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::tokenizer {

std::vector<std::string> token_bytes(const Tokenizer& tokenizer, int64_t vocab_size) {
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
    } catch (const Error&) {  // an id with no token
    }
  }
  return bytes;
}

void check_same_tokenizer(const Tokenizer& a, std::string_view a_owner, const Tokenizer& b,
                          std::string_view b_owner) {
  check(a.vocab_size() == b.vocab_size(), "{}'s tokenizer has {} tokens and {}'s {}", a_owner,
        a.vocab_size(), b_owner, b.vocab_size());
  check(a.special_tokens() == b.special_tokens(),
        "{}'s tokenizer has other special tokens than {}'s", a_owner, b_owner);
  const std::vector<std::string> as = token_bytes(a, a.vocab_size());
  const std::vector<std::string> bs = token_bytes(b, b.vocab_size());
  const auto [x, y] = std::mismatch(as.begin(), as.end(), bs.begin());
  if (x != as.end()) {
    throw Error(fmt::format("token {} is {:?} to {}'s tokenizer and {:?} to {}'s", x - as.begin(),
                            *x, a_owner, *y, b_owner));
  }
}

}  // namespace tessera::tokenizer
