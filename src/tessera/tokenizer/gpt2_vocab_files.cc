#include "tessera/tokenizer/gpt2_vocab_files.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/utf8.h"

namespace tessera::tokenizer {
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

std::string map_gpt2_bytes(std::string_view bytes) {
  static const std::array<char32_t, 256> kCodePointOfByte = [] {
    std::array<char32_t, 256> code_point{};
    for (size_t c = 0; c < kByteOfCodePoint.size(); ++c) {
      if (kByteOfCodePoint[c] >= 0) code_point[size_t(kByteOfCodePoint[c])] = char32_t(c);
    }
    return code_point;
  }();
  std::string out;
  for (const unsigned char b : bytes) {
    const char32_t c = kCodePointOfByte[b];
    if (c < 0x80) {
      out += char(c);
    } else {
      out += char(0xC0 | c >> 6);
      out += char(0x80 | (c & 0x3F));
    }
  }
  return out;
}

Gpt2VocabBuilder::Gpt2VocabBuilder(const nlohmann::json& encoder, const std::string& source,
                                   const std::set<std::string>& special)
    : source_(source) {
  check(encoder.is_object(), "{}: expected a JSON object of token -> id, got {}", source,
        encoder.type_name());
  for (const auto& [key, value] : encoder.items()) {
    if (!(value.is_number_integer() && value.get<int64_t>() >= 0 &&
          value.get<int64_t>() <= kMaxTokenId)) {
      fail("{}: token \"{}\" has id {}, expected an integer in [0, {}]", source, printable(key),
           printable(
               value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).substr(0, 40)),
           kMaxTokenId);
    }
    const int32_t id = value.get<int32_t>();
    if (special.count(key)) {
      vocab_.special_tokens.emplace_back(key, id);
      continue;
    }
    std::optional<std::string> bytes = unmap_bytes(key);
    if (!bytes || bytes->empty()) {
      fail("{}: token \"{}\" is not written in GPT-2's byte-to-unicode alphabet", source,
           printable(key));
    }
    if (size_t(id) >= vocab_.tokens.size()) vocab_.tokens.resize(size_t(id) + 1);
    check(vocab_.tokens[id].empty(), "{}: id {} is given to two tokens", source, id);
    ids_.emplace(*bytes, id);
    vocab_.tokens[id] = std::move(*bytes);
  }
}

std::optional<int32_t> Gpt2VocabBuilder::id_of(std::string_view mapped) const {
  std::optional<std::string> bytes = unmap_bytes(mapped);
  if (!bytes) return std::nullopt;
  auto it = ids_.find(*bytes);
  return it == ids_.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

void Gpt2VocabBuilder::add_merge(std::string_view left, std::string_view right,
                                 const std::string& where) {
  const std::string merged = std::string(left) + std::string(right);
  std::optional<int32_t> left_id = id_of(left), right_id = id_of(right), result = id_of(merged);
  for (auto [id, token] : {std::pair{left_id, left}, std::pair{right_id, right}}) {
    if (!id) fail("{}: token \"{}\" is not in {}", where, printable(token), source_);
  }
  if (!result) fail("{}: the merged token \"{}\" is not in {}", where, printable(merged), source_);
  vocab_.merges.push_back({*left_id, *right_id, *result, int32_t(vocab_.merges.size())});
}

BpeVocab parse_gpt2_vocab(std::string_view encoder_json, const std::string& encoder_source,
                          std::string_view vocab_bpe, const std::string& bpe_source) {
  nlohmann::json encoder;
  try {
    encoder = nlohmann::json::parse(encoder_json.begin(), encoder_json.end());
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    fail("{}: not valid JSON ({})", encoder_source, printable(e.what()));
  }
  Gpt2VocabBuilder builder(encoder, encoder_source, {kEndOfText});
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
    builder.add_merge(line.substr(0, space), line.substr(space + 1),
                      fmt::format("{}:{}", bpe_source, line_number));
  }
  return builder.take();
}

}  // namespace tessera::tokenizer
