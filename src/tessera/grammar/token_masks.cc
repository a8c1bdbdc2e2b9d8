#include "tessera/grammar/token_masks.h"

#include <algorithm>

namespace tessera::grammar {

namespace {

// A token's length in code points when all of it is plain string text, read from a character
// boundary (it may end inside a character); -1 otherwise.
int64_t plain_code_points(const std::string& bytes) {
  int64_t points = 0, owed = 0;
  for (const char b : bytes) {
    const uint8_t c = uint8_t(b);
    if (owed > 0) {
      if (c < 0x80 || c > 0xBF) return -1;
      --owed;
      continue;
    }
    if (c == '"' || c == '\\' || c < 0x20) return -1;
    if (c >= 0x80) {
      // Lead bytes whose next byte's range is the full 0x80-0xBF; the rest go the slow way.
      if (c >= 0xC2 && c <= 0xDF) {
        owed = 1;
      } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
        owed = 2;
      } else if (c >= 0xF1 && c <= 0xF3) {
        owed = 3;
      } else {
        return -1;
      }
    }
    ++points;
  }
  return points;
}

void set_bit(TokenMask& mask, int32_t id) { mask[size_t(id >> 6)] |= uint64_t(1) << (id & 63); }

}  // namespace

Vocabulary::Vocabulary(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {
  std::vector<int32_t> text_ids, not_plain_ids;
  std::vector<std::vector<int32_t>> plain_by_points;
  for (int32_t id = 0; id < int32_t(tokens_.size()); ++id) {
    if (tokens_[size_t(id)].empty()) continue;
    text_ids.push_back(id);
    const int64_t points = plain_code_points(tokens_[size_t(id)]);
    if (points < 0) {
      not_plain_ids.push_back(id);
      continue;
    }
    if (plain_by_points.size() <= size_t(points)) plain_by_points.resize(size_t(points) + 1);
    plain_by_points[size_t(points)].push_back(id);
  }
  all_ = build_trie(std::move(text_ids));
  not_plain_ = build_trie(std::move(not_plain_ids));
  TokenMask mask(size_t(mask_words()), 0);
  for (const std::vector<int32_t>& ids : plain_by_points) {
    for (const int32_t id : ids) set_bit(mask, id);
    plain_up_to_.push_back(mask);
  }
  if (plain_up_to_.empty()) plain_up_to_.push_back(mask);
}

Vocabulary::Trie Vocabulary::build_trie(std::vector<int32_t> ids) const {
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return tokens_[size_t(a)] < tokens_[size_t(b)] ||
           (tokens_[size_t(a)] == tokens_[size_t(b)] && a < b);
  });
  Trie trie;
  trie.token_ids = ids;
  trie.nodes.emplace_back();
  // Node `node` holds the sorted ids [lo, hi), which share their first `depth` bytes: those of
  // exactly that length end here (they sort first), the rest go to a child per next byte.
  struct Pending {
    int32_t node, lo, hi, depth;
  };
  std::vector<Pending> pending = {{0, 0, int32_t(ids.size()), 0}};
  while (!pending.empty()) {
    const Pending p = pending.back();
    pending.pop_back();
    int32_t i = p.lo;
    while (i < p.hi && int32_t(tokens_[size_t(ids[size_t(i)])].size()) == p.depth) ++i;
    trie.nodes[size_t(p.node)].first_token = p.lo;
    trie.nodes[size_t(p.node)].tokens = i - p.lo;
    trie.nodes[size_t(p.node)].first_child = int32_t(trie.nodes.size());
    while (i < p.hi) {
      const char byte = tokens_[size_t(ids[size_t(i)])][size_t(p.depth)];
      int32_t j = i;
      while (j < p.hi && tokens_[size_t(ids[size_t(j)])][size_t(p.depth)] == byte) ++j;
      TrieNode child;
      child.byte = uint8_t(byte);
      trie.nodes.push_back(child);
      ++trie.nodes[size_t(p.node)].children;
      pending.push_back({int32_t(trie.nodes.size() - 1), i, j, p.depth + 1});
      i = j;
    }
  }
  return trie;
}

TokenGrammar::TokenGrammar(JsonGrammar grammar, std::shared_ptr<const Vocabulary> vocabulary,
                           int64_t max_walk_steps)
    : grammar_(std::move(grammar)),
      vocabulary_(std::move(vocabulary)),
      matcher_(grammar_),
      max_walk_steps_(max_walk_steps) {}

const TokenMask& TokenGrammar::allowed(const MatchState& state) {
  std::lock_guard lock(mutex_);
  state.key(key_);
  if (const auto found = masks_.find(key_); found != masks_.end()) {
    ++reused_;
    return found->second;
  }
  if (int64_t(masks_.size()) >= kMaxCachedStates) masks_.clear();
  ++computed_;
  walk_steps_left_ = max_walk_steps_;
  TokenMask& mask = masks_[key_];
  const Vocabulary& v = *vocabulary_;
  if (const int64_t room = matcher_.string_room(state); room >= 0) {
    mask = v.plain_up_to_[size_t(std::min<int64_t>(room, int64_t(v.plain_up_to_.size()) - 1))];
    walk(v.not_plain_, 0, state, 0, mask);
  } else {
    mask.assign(size_t(v.mask_words()), 0);
    walk(v.all_, 0, state, 0, mask);
  }
  return mask;
}

void TokenGrammar::walk(const Vocabulary::Trie& trie, int32_t node, const MatchState& state,
                        size_t depth, TokenMask& mask) {
  if (depth_states_.size() <= depth) depth_states_.emplace_back();
  MatchState& next = depth_states_[depth];
  const Vocabulary::TrieNode& n = trie.nodes[size_t(node)];
  for (int32_t c = n.first_child; c < n.first_child + n.children; ++c) {
    const Vocabulary::TrieNode& child = trie.nodes[size_t(c)];
    walk_steps_left_ -= state.size();
    if (walk_steps_left_ < 0) return;
    matcher_.advance(state, child.byte, next);
    if (next.empty()) continue;
    for (int32_t t = child.first_token; t < child.first_token + child.tokens; ++t) {
      set_bit(mask, trie.token_ids[size_t(t)]);
    }
    if (child.children > 0) walk(trie, c, next, depth + 1, mask);
  }
}

bool TokenGrammar::advance(MatchState& state, int32_t token) {
  std::lock_guard lock(mutex_);
  if (token < 0 || token >= vocabulary_->size() || vocabulary_->bytes(token).empty()) return false;
  return matcher_.advance(state, vocabulary_->bytes(token));
}

}  // namespace tessera::grammar
