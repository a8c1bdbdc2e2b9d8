#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/grammar/json_schema.h"

namespace tessera::grammar {

// Where a match is inside one node: which part comes next (phase), and the node's counters. The
// fields are all that distinguish two places, so a stack of frames, byte for byte, is a key.
struct Frame {
  int32_t node = 0;
  int32_t index = 0;  // kObject: the property; kLiterals: first literal still possible
  int32_t count = 0;  // code points, items, digits, or bytes of a key or literal matched
  int32_t aux = 0;    // kLiterals: one past the last literal possible; kString: bytes owed
  uint8_t phase = 0;
  uint8_t lo = 0, hi = 0;  // kString: the range of the next byte of a UTF-8 character
  uint8_t unused = 0;
};
static_assert(sizeof(Frame) == 20);

using Stack = std::vector<Frame>;

// The places a match may be after some text: one stack per way the text can be read so far
// (usually one; anyOf, optional properties and literals sharing a prefix make more). Stacks'
// storage is kept between uses, so following text allocates only while it grows.
class MatchState {
 public:
  int64_t size() const { return size_; }
  const Stack& operator[](int64_t i) const { return stacks_[size_t(i)]; }
  bool empty() const { return size_ == 0; }
  // Some way of reading the text ends the value: nothing more may follow on that reading.
  bool complete() const;
  // The stacks, byte for byte, for caching what a state allows.
  void key(std::string& out) const;

 private:
  friend class JsonMatcher;
  void clear() { size_ = 0; }
  int64_t add(const Stack& from);
  // Drops the stacks not kept, and repeats.
  void compact(const std::vector<char>& kept);

  std::deque<Stack> stacks_;
  int64_t size_ = 0;
};

// Follows text through a JsonGrammar, byte by byte.
class JsonMatcher {
 public:
  // The deepest nesting of objects, arrays and the values inside them followed; deeper text is
  // refused, so a recursive schema or json_object output stays bounded.
  static constexpr int64_t kMaxDepth = 64;
  // The most readings kept at once; beyond it the later ones are dropped, which may refuse text
  // the schema allows but never allows text it refuses.
  static constexpr int64_t kMaxStacks = 256;

  explicit JsonMatcher(const JsonGrammar& grammar) : grammar_(&grammar) {}

  // The state before any text: the root object not begun.
  void start(MatchState& state) const;
  // `to` becomes `from` after one more byte; empty when no reading takes it.
  void advance(const MatchState& from, uint8_t byte, MatchState& to);
  // Follows bytes from `state` in place; false (state then unspecified) when refused.
  bool advance(MatchState& state, std::string_view bytes);

  // When `state` is one reading inside a string's text, between characters: how many more code
  // points the string may take; otherwise -1.
  int64_t string_room(const MatchState& state) const;

  const JsonGrammar& grammar() const { return *grammar_; }

 private:
  // kAgain: the stack's top changed and takes the same byte.
  enum class Step { kTaken, kRefused, kAgain };

  // Feeds byte c to the stack in `slot` of out; false when that reading cannot take it. A
  // choice copies the stack into new slots of out first (fork), one per other way to read on.
  bool feed(int64_t slot, uint8_t c, MatchState& out);
  bool feed_string(Frame& f, const SchemaNode& node, uint8_t c) const;
  Step feed_literal(int64_t slot, uint8_t c, MatchState& out);
  Step feed_array(Stack& s, uint8_t c) const;
  Step feed_object(int64_t slot, uint8_t c, MatchState& out);
  int64_t fork(int64_t slot, MatchState& out);
  bool push(Stack& s, int32_t node) const;

  const JsonGrammar* grammar_;
  std::vector<char> kept_;
  MatchState scratch_;
};

// Whether `text` is a complete value of the grammar (for tests and checks; the engine follows
// tokens incrementally).
bool matches(const JsonGrammar& grammar, std::string_view text);

}  // namespace tessera::grammar
