#include "tessera/tokenizer/bpe_tokenizer.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

#include "tessera/core/error.h"
#include "tessera/core/utf8.h"
#include "tessera/tokenizer/gpt2_pretokenizer.h"
#include "tessera/tokenizer/llama3_pretokenizer.h"

namespace tessera::tokenizer {
namespace {

// Text repeats its words, so each thread remembers how it split recent multi-token pieces;
// the bound keeps memory flat on corpora with endless distinct pieces.
constexpr size_t kCacheEntries = 1 << 16;
constexpr size_t kCachedPieceMaxBytes = 64;
// More parts than threads lets a thread that finishes early (or shares its core) take more.
constexpr size_t kPartsPerThread = 32;

struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view piece) const { return std::hash<std::string_view>{}(piece); }
};

struct PieceCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<int32_t>, PieceHash, std::equal_to<>> entries;
};
thread_local PieceCache piece_cache;

std::atomic<uint64_t> next_cache_owner{1};

}  // namespace

BpeTokenizer::BpeTokenizer(BpeVocab vocab, std::string kind, const std::string& source)
    : kind_(std::move(kind)),
      pattern_(vocab.pattern),
      tokens_(std::move(vocab.tokens)),
      cache_owner_(next_cache_owner++) {
  const size_t mergeable = tokens_.size();
  size_t size = mergeable;
  for (const auto& [text, id] : vocab.special_tokens) size = std::max(size, size_t(id) + 1);
  tokens_.resize(size);
  is_valid_id_.assign(size, false);
  for (size_t id = 0; id < mergeable; ++id) {
    if (tokens_[id].empty()) continue;
    is_valid_id_[id] = true;
    if (!mergeable_ids_.insert(tokens_[id], int32_t(id))) {
      fail("{}: tokens {} and {} are the same bytes \"{}\"", source,
           mergeable_ids_.find(tokens_[id]), id, printable(tokens_[id]));
    }
  }
  for (int b = 0; b < 256; ++b) {
    const char byte = char(b);
    byte_ids_[b] = mergeable_ids_.find(std::string_view(&byte, 1));
    check(byte_ids_[b] >= 0, "{}: byte 0x{:02x} has no token", source, b);
  }
  for (const auto& [text, id] : vocab.special_tokens) {
    check(id >= 0 && !is_valid_id_[id], "{}: special token {} has id {}, which is taken", source,
          text, id);
    check(!text.empty(), "{}: special token {} is empty", source, id);
    if (text == kEndOfText || text == kLlama3EndOfText) end_of_text_ = id;
    tokens_[id] = text;
    is_valid_id_[id] = true;
  }
  special_tokens_ = std::move(vocab.special_tokens);
  for (const BpeMerge& m : vocab.merges) {
    check(m.left >= 0 && size_t(m.left) < mergeable && m.right >= 0 &&
              size_t(m.right) < mergeable && m.result >= 0 && size_t(m.result) < mergeable,
          "{}: merge of tokens {} and {} into {} names an id outside the vocabulary", source,
          m.left, m.right, m.result);
    // Merges come in rank order, so a pair's first listing is the only one that can apply.
    merges_.emplace(merge_pair_key(m.left, m.right), MergeTarget{m.rank, m.result});
  }
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  const int threads =
      text.size() < kParallelMinBytes || omp_in_parallel() ? 1 : omp_get_max_threads();
  std::vector<int32_t> ids;
  if (threads == 1) {
    ids.reserve(text.size() / 4);
    encode_serial(text, ids);
    return ids;
  }
  const size_t most = size_t(threads) * kPartsPerThread;
  const std::vector<size_t> cuts =
      pattern_ == SplitPattern::kGpt2 ? gpt2_cut_points(text, most) : llama3_cut_points(text, most);
  std::vector<std::vector<int32_t>> parts(cuts.size() - 1);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (size_t i = 0; i < parts.size(); ++i) {
    // Filled locally: neighbouring parts' vector headers share a cache line.
    std::vector<int32_t> part;
    part.reserve((cuts[i + 1] - cuts[i]) / 4);
    encode_serial(text.substr(cuts[i], cuts[i + 1] - cuts[i]), part);
    parts[i] = std::move(part);
  }
  size_t total = 0;
  for (const auto& part : parts) total += part.size();
  ids.reserve(total);
  for (const auto& part : parts) ids.insert(ids.end(), part.begin(), part.end());
  return ids;
}

void BpeTokenizer::encode_serial(std::string_view text, std::vector<int32_t>& out) const {
  const auto piece_end = pattern_ == SplitPattern::kGpt2 ? gpt2_piece_end : llama3_piece_end;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = piece_end(text, pos);
    encode_piece(text.substr(pos, end - pos), out);
    pos = end;
  }
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  if (const int32_t id = mergeable_ids_.find(piece); id >= 0) {
    out.push_back(id);
    return;
  }
  if (piece.size() > kCachedPieceMaxBytes) {
    merge_bytes(piece, out);
    return;
  }
  PieceCache& cache = piece_cache;
  if (cache.owner != cache_owner_) {
    cache.entries.clear();
    cache.owner = cache_owner_;
  }
  if (auto it = cache.entries.find(piece); it != cache.entries.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t first = out.size();
  merge_bytes(piece, out);
  if (cache.entries.size() >= kCacheEntries) cache.entries.clear();
  cache.entries.emplace(piece, std::vector<int32_t>(out.begin() + first, out.end()));
}

// tiktoken's merge loop, with a heap of candidate pairs instead of a rescan after every merge,
// so a long piece costs O(n log n) rather than O(n^2). Candidates order by (rank, position),
// which picks the same pair as tiktoken's "lowest rank, then leftmost" scan; a candidate is
// stale once either side has changed, which the ids it recorded reveal (a symbol with the same
// start and id covers the same bytes).
void BpeTokenizer::merge_bytes(std::string_view piece, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t id;  // -1 once merged into the symbol on its left
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t result;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap;
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  };
  const int32_t n = int32_t(piece.size());
  symbols.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; ++i) {
    symbols[i] = {byte_ids_[static_cast<unsigned char>(piece[i])], i - 1, i + 1 < n ? i + 1 : -1};
  }
  const auto push_candidate = [&](int32_t left) {
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(merge_pair_key(symbols[left].id, symbols[right].id));
    if (it == merges_.end()) return;
    heap.push_back({it->second.rank, left, symbols[left].id, symbols[right].id, it->second.result});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; ++i) push_candidate(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;
    if (left.prev >= 0) push_candidate(left.prev);
    push_candidate(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

std::string BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    check(id >= 0 && size_t(id) < tokens_.size() && is_valid_id_[id],
          "{} tokenizer: token id {} at position {} is not in the vocabulary (size {})", kind_, id,
          i, tokens_.size());
    text += tokens_[id];
  }
  return text;
}

}  // namespace tessera::tokenizer
