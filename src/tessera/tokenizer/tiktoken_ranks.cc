#include "tessera/tokenizer/tiktoken_ranks.h"

#include <charconv>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/utf8.h"
#include "tessera/tokenizer/base64.h"
#include "tessera/tokenizer/bpe_vocab.h"

namespace tessera::tokenizer {
namespace {

// The 256 bytes come first in a byte-level BPE; every merge after them makes one token.
constexpr size_t kByteTokens = 256;

// Checks the ranks form a byte-level BPE, naming the line of the lowest rank that does not: a
// changed byte in one token breaks that token's split, or the splits of the tokens built on it.
void check_bpe_structure(const BpeVocab& vocab, const std::vector<size_t>& line_of,
                         const std::string& source) {
  std::vector<bool> built(vocab.tokens.size(), false);
  for (const BpeMerge& m : vocab.merges) {
    if (m.left < m.result && m.right < m.result) built[size_t(m.result)] = true;
  }
  for (size_t id = 0; id < vocab.tokens.size(); ++id) {
    const std::string& token = vocab.tokens[id];
    if (token.empty()) continue;
    if (id < kByteTokens) {
      check(token.size() == 1,
            "{}:{}: rank {} holds \"{}\", but ranks 0-255 of a byte-level BPE are single bytes; "
            "the file is corrupted",
            source, line_of[id], id, printable(token));
    } else {
      check(built[id],
            "{}:{}: token \"{}\" (rank {}) is not two tokens of lower rank joined, as every "
            "token after the 256 bytes of a byte-level BPE is; the file is corrupted",
            source, line_of[id], printable(token), id);
    }
  }
}

}  // namespace

BpeVocab parse_tiktoken_ranks(std::string_view text, const std::string& source) {
  BpeVocab vocab;
  std::vector<std::string>& tokens = vocab.tokens;
  std::vector<size_t> line_of;  // by rank
  std::unordered_map<std::string, int64_t> ranks;
  size_t line_number = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0) {
      fail("{}:{}: expected \"<base64 token> <rank>\", got \"{}\"", source, line_number,
           printable(line.substr(0, 80)));
    }
    const std::string_view encoded = line.substr(0, space), rank_text = line.substr(space + 1);
    std::optional<std::string> bytes = base64_decode(encoded);
    if (!bytes || bytes->empty()) {
      fail("{}:{}: \"{}\" is not base64 of a token", source, line_number,
           printable(encoded.substr(0, 80)));
    }
    int64_t rank = -1;
    auto [ptr, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
    if (!(ec == std::errc() && ptr == rank_text.data() + rank_text.size() && rank >= 0 &&
          rank <= kMaxTokenId)) {
      fail("{}:{}: rank \"{}\" is not an integer in [0, {}]", source, line_number,
           printable(rank_text.substr(0, 80)), kMaxTokenId);
    }
    if (size_t(rank) >= tokens.size()) {
      tokens.resize(size_t(rank) + 1);
      line_of.resize(size_t(rank) + 1);
    }
    if (!tokens[rank].empty()) {
      fail("{}:{}: rank {} was already given to \"{}\" on line {}", source, line_number, rank,
           printable(tokens[rank]), line_of[rank]);
    }
    auto [it, fresh] = ranks.emplace(*bytes, rank);
    if (!fresh) {
      fail("{}:{}: token \"{}\" already has rank {} on line {}", source, line_number,
           printable(*bytes), it->second, line_of[size_t(it->second)]);
    }
    tokens[rank] = std::move(*bytes);
    line_of[rank] = line_number;
  }
  check(!tokens.empty(), "{}: no tokens in the rank file", source);
  vocab.merges = merges_from_ranks(tokens);
  check_bpe_structure(vocab, line_of, source);
  return vocab;
}

std::string format_tiktoken_ranks(const std::vector<std::string>& tokens) {
  std::string out;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!tokens[id].empty()) out += base64_encode(tokens[id]) + " " + std::to_string(id) + "\n";
  }
  return out;
}

}  // namespace tessera::tokenizer
