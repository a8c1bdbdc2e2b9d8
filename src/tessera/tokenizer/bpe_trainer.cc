#include "tessera/tokenizer/bpe_trainer.h"

#include <omp.h>

#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/tokenizer/gpt2_pretokenizer.h"

namespace tessera::tokenizer {
namespace {

using PieceCounts = std::unordered_map<std::string_view, int64_t>;

PieceCounts count_pieces(const std::vector<std::string_view>& texts) {
  const int threads = omp_get_max_threads();
  std::vector<std::string_view> parts;
  for (std::string_view text : texts) {
    const std::vector<size_t> cuts = gpt2_cut_points(text, size_t(threads) * 8);
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      parts.push_back(text.substr(cuts[i], cuts[i + 1] - cuts[i]));
    }
  }
  std::vector<PieceCounts> counts(threads);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (size_t i = 0; i < parts.size(); ++i) {
    PieceCounts& mine = counts[omp_get_thread_num()];
    for_each_gpt2_piece(parts[i], [&](std::string_view piece) { ++mine[piece]; });
  }
  for (int t = 1; t < threads; ++t) {
    for (const auto& [piece, n] : counts[t]) counts[0][piece] += n;
  }
  return std::move(counts[0]);
}

struct Word {
  std::vector<int32_t> symbols;
  int64_t count;
};

struct Candidate {
  int64_t count;
  uint64_t pair;
  // The most frequent pair first; among equals the smallest (left, right).
  bool operator<(const Candidate& other) const {
    return count != other.count ? count < other.count : pair > other.pair;
  }
};

// Pair counts over all words, kept current as merges rewrite words, with a lazy max-heap: an
// entry whose count is out of date is re-queued with the current count when it surfaces.
class PairStats {
 public:
  // Adds the pairs of word `index` with `weight` (its count, negative to take them away).
  void add_pairs(const std::vector<int32_t>& symbols, int64_t weight, int32_t index) {
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const uint64_t pair = merge_pair_key(symbols[i], symbols[i + 1]);
      counts_[pair] += weight;
      if (weight > 0) {
        words_[pair].push_back(index);
        touched_.push_back(pair);
      }
    }
  }

  // Queues every pair whose count may have grown since the last call.
  void requeue_touched() {
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (uint64_t pair : touched_) heap_.push({counts_[pair], pair});
    touched_.clear();
  }

  // The most frequent pair, or false when none is left.
  bool pop_best(uint64_t& pair) {
    while (!heap_.empty()) {
      const Candidate top = heap_.top();
      heap_.pop();
      const int64_t current = counts_[top.pair];
      if (current == top.count && current > 0) {
        pair = top.pair;
        return true;
      }
      if (current > 0) heap_.push({current, top.pair});
    }
    return false;
  }

  // The words that may contain `pair` (each once), forgetting them.
  std::vector<int32_t> take_words(uint64_t pair) {
    std::vector<int32_t> words = std::move(words_[pair]);
    words_.erase(pair);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    return words;
  }

 private:
  std::unordered_map<uint64_t, int64_t> counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> words_;
  std::vector<uint64_t> touched_;
  std::priority_queue<Candidate> heap_;
};

// Replaces each non-overlapping (left, right), left to right, by `merged`; false if none.
bool merge_in_word(std::vector<int32_t>& symbols, int32_t left, int32_t right, int32_t merged) {
  size_t out = 0;
  bool changed = false;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
      symbols[out++] = merged;
      ++i;
      changed = true;
    } else {
      symbols[out++] = symbols[i];
    }
  }
  symbols.resize(out);
  return changed;
}

}  // namespace

BpeVocab train_bpe(const std::vector<std::string_view>& texts, int64_t vocab_size) {
  check(vocab_size >= 257 && vocab_size <= int64_t(kMaxTokenId) + 1,
        "vocabulary size {} must be in [257, {}] (256 bytes and <|endoftext|> come first)",
        vocab_size, int64_t(kMaxTokenId) + 1);
  const PieceCounts counts = count_pieces(texts);
  // Sorted pieces make word indices, and so the whole run, independent of hash order.
  std::vector<std::pair<std::string_view, int64_t>> pieces(counts.begin(), counts.end());
  std::sort(pieces.begin(), pieces.end());
  std::vector<Word> words;
  words.reserve(pieces.size());
  PairStats stats;
  for (const auto& [piece, count] : pieces) {
    Word word{std::vector<int32_t>(piece.begin(), piece.end()), count};
    for (int32_t& symbol : word.symbols) symbol = static_cast<unsigned char>(symbol);
    stats.add_pairs(word.symbols, word.count, int32_t(words.size()));
    words.push_back(std::move(word));
  }
  stats.requeue_touched();

  BpeVocab vocab;
  std::unordered_map<std::string, int32_t> ids;
  for (int b = 0; b < 256; ++b) {
    vocab.tokens.emplace_back(1, char(b));
    ids.emplace(vocab.tokens.back(), b);
  }
  uint64_t pair;
  while (int64_t(vocab.tokens.size()) + 1 < vocab_size && stats.pop_best(pair)) {
    const int32_t left = int32_t(pair >> 32), right = int32_t(pair & 0xFFFFFFFF);
    // Two different splits can build the same bytes; they share one token.
    auto [it, fresh] =
        ids.emplace(vocab.tokens[left] + vocab.tokens[right], int32_t(vocab.tokens.size()));
    if (fresh) vocab.tokens.push_back(it->first);
    for (int32_t index : stats.take_words(pair)) {
      Word& word = words[index];
      const std::vector<int32_t> before = word.symbols;
      if (!merge_in_word(word.symbols, left, right, it->second)) continue;
      stats.add_pairs(before, -word.count, index);
      stats.add_pairs(word.symbols, word.count, index);
    }
    stats.requeue_touched();
  }
  vocab.special_tokens = {{kEndOfText, int32_t(vocab.tokens.size())}};
  vocab.merges = merges_from_ranks(vocab.tokens);
  return vocab;
}

}  // namespace tessera::tokenizer
