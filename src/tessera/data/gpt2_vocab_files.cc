#include "tessera/data/gpt2_vocab_files.h"

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/utf8.h"

namespace tessera::data {
namespace {

// GPT-2's bytes_to_unicode() inverted: printable Latin-1 bytes stand for themselves, the other
// 68 bytes for U+0100 onwards in byte order.
constexpr std::array<int16_t, 324> kByteOfCodePoint = [] {
  std::array<int16_t, 324> byte_of{};
  byte_of.fill(-1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    byte_of[printable ? b : next++] = int16_t(b);
  }
  return byte_of;
}();

std::optional<std::string> unmap_bytes(std::string_view text) {
  std::string bytes;
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    if (c.code_point >= kByteOfCodePoint.size() || kByteOfCodePoint[c.code_point] < 0) {
      return std::nullopt;
    }
    bytes += char(kByteOfCodePoint[c.code_point]);
    pos += c.length;
  }
  return bytes;
}

}  // namespace

BpeVocab parse_gpt2_vocab(std::string_view encoder_json, const std::string& encoder_source,
                          std::string_view vocab_bpe, const std::string& bpe_source) {
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(encoder_json.begin(), encoder_json.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    fail("{}: not valid JSON ({})", encoder_source, printable(e.what()));
  }
  check(encoder.is_object(), "{}: expected a JSON object of token -> id, got {}", encoder_source,
        encoder.type_name());
  BpeVocab vocab;
  std::unordered_map<std::string, int32_t> ids;  // bytes -> id
  for (const auto& [key, value] : encoder.items()) {
    if (!(value.is_number_integer() && value.get<int64_t>() >= 0 &&
          value.get<int64_t>() <= kMaxTokenId)) {
      fail("{}: token \"{}\" has id {}, expected an integer in [0, {}]", encoder_source,
           printable(key),
           printable(
               value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 40)),
           kMaxTokenId);
    }
    const int32_t id = value.get<int32_t>();
    if (key == kEndOfText) {
      vocab.special_tokens.emplace_back(key, id);
      continue;
    }
    std::optional<std::string> bytes = unmap_bytes(key);
    if (!bytes || bytes->empty()) {
      fail("{}: token \"{}\" is not written in GPT-2's byte-to-unicode alphabet", encoder_source,
           printable(key));
    }
    if (size_t(id) >= vocab.tokens.size()) vocab.tokens.resize(size_t(id) + 1);
    check(vocab.tokens[id].empty(), "{}: id {} is given to two tokens", encoder_source, id);
    ids.emplace(*bytes, id);
    vocab.tokens[id] = std::move(*bytes);
  }

  const auto id_of = [&](std::string_view mapped) -> std::optional<int32_t> {
    std::optional<std::string> bytes = unmap_bytes(mapped);
    if (!bytes) return std::nullopt;
    auto it = ids.find(*bytes);
    return it == ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
  };
  size_t line_number = 0;
  for (size_t pos = 0; pos < vocab_bpe.size();) {
    size_t end = vocab_bpe.find('\n', pos);
    if (end == std::string_view::npos) end = vocab_bpe.size();
    const std::string_view line = vocab_bpe.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line_number == 1 && line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      fail("{}:{}: expected two tokens separated by one space, got \"{}\"", bpe_source, line_number,
           printable(line.substr(0, 80)));
    }
    const std::string_view left = line.substr(0, space), right = line.substr(space + 1);
    const std::string merged = std::string(left) + std::string(right);
    std::optional<int32_t> left_id = id_of(left), right_id = id_of(right), result = id_of(merged);
    for (auto [id, token] : {std::pair{left_id, left}, std::pair{right_id, right}}) {
      if (!id) {
        fail("{}:{}: token \"{}\" is not in {}", bpe_source, line_number, printable(token),
             encoder_source);
      }
    }
    if (!result) {
      fail("{}:{}: the merged token \"{}\" is not in {}", bpe_source, line_number,
           printable(merged), encoder_source);
    }
    vocab.merges.push_back({*left_id, *right_id, *result, int32_t(vocab.merges.size())});
  }
  return vocab;
}

}  // namespace tessera::data
