#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/grammar/json_matcher.h"
#include "tessera/grammar/json_schema.h"

namespace tessera::grammar {

// One bit per token id: set where the token may come next.
using TokenMask = std::vector<uint64_t>;

inline bool allows(const TokenMask& mask, int64_t id) {
  return (mask[size_t(id >> 6)] >> (id & 63)) & 1;
}

// A vocabulary's tokens as bytes, arranged to find quickly which ones a grammar state takes: a
// trie of every token, and since most of a JSON reply is inside strings, the tokens that are
// plain string text (no quote, backslash or control byte, UTF-8 that may end mid-character)
// grouped by their length in code points, with a trie of the others.
class Vocabulary {
 public:
  // tokens[id]: the bytes id stands for; empty where it stands for no text (special tokens,
  // ids past the tokenizer's), which no mask allows.
  explicit Vocabulary(std::vector<std::string> tokens);

  int64_t size() const { return int64_t(tokens_.size()); }
  const std::string& bytes(int32_t id) const { return tokens_[size_t(id)]; }
  int64_t mask_words() const { return (size() + 63) / 64; }

 private:
  friend class TokenGrammar;
  struct TrieNode {
    int32_t first_child = 0, children = 0;  // children are consecutive nodes
    int32_t first_token = 0, tokens = 0;    // in token_ids, those ending here
    uint8_t byte = 0;
  };
  struct Trie {
    std::vector<TrieNode> nodes;  // nodes[0] is the root
    std::vector<int32_t> token_ids;
  };
  Trie build_trie(std::vector<int32_t> ids) const;

  std::vector<std::string> tokens_;
  Trie all_, not_plain_;
  // [k]: the plain tokens of at most k code points; the last holds them all.
  std::vector<TokenMask> plain_up_to_;
};

// A grammar bound to a vocabulary: which tokens each state allows, computed once per state and
// kept (up to kMaxCachedStates states, then started afresh), and states followed token by token.
// Shared by every request with the same schema; its calls are serialised.
class TokenGrammar {
 public:
  static constexpr int64_t kMaxCachedStates = 4096;
  // The most bytes times readings one mask's walk follows through the matcher (a 50,257-token
  // vocabulary's trie has about 10^5 nodes). A grammar that would take more, as a hostile
  // schema's thousands of open readings would, gets a mask of the tokens found by then: fewer
  // tokens, never a token the grammar refuses, and a bounded stall of the engine.
  static constexpr int64_t kMaxWalkSteps = 1'000'000;

  TokenGrammar(JsonGrammar grammar, std::shared_ptr<const Vocabulary> vocabulary,
               int64_t max_walk_steps = kMaxWalkSteps);
  TokenGrammar(const TokenGrammar&) = delete;
  TokenGrammar& operator=(const TokenGrammar&) = delete;

  void start(MatchState& state) const { matcher_.start(state); }
  // The tokens allowed after `state`, which must not be complete; valid until the next call.
  const TokenMask& allowed(const MatchState& state);
  // Follows one token; false when the state refuses it.
  bool advance(MatchState& state, int32_t token);

  const Vocabulary& vocabulary() const { return *vocabulary_; }
  // States whose masks were computed, and how often a mask was found computed.
  int64_t masks_computed() const { return computed_; }
  int64_t masks_reused() const { return reused_; }

 private:
  void walk(const Vocabulary::Trie& trie, int32_t node, const MatchState& state, size_t depth,
            TokenMask& mask);

  const JsonGrammar grammar_;
  const std::shared_ptr<const Vocabulary> vocabulary_;
  JsonMatcher matcher_;
  std::mutex mutex_;
  std::unordered_map<std::string, TokenMask> masks_;
  std::string key_;
  std::deque<MatchState> depth_states_;  // the walk's state after each byte of a token
  int64_t computed_ = 0, reused_ = 0;
  const int64_t max_walk_steps_;
  int64_t walk_steps_left_ = 0;
};

}  // namespace tessera::grammar
