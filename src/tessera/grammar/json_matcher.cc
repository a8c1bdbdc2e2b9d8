#include "tessera/grammar/json_matcher.h"

#include <algorithm>
#include <cstring>

namespace tessera::grammar {

namespace {

// Phases of each kind of node; 0 is always "not begun".
constexpr uint8_t kStart = 0;
enum StringPhase : uint8_t { kStringBody = 1, kEscape, kHex };
enum NumberPhase : uint8_t { kSign = 1, kZero, kInt, kFracStart, kFrac, kExpStart, kExpSign, kExp };
enum LiteralPhase : uint8_t { kLiteralBody = 1 };
// Arrays and objects: kOpen after the bracket, kNext after a comma, kAfterValue after an item or
// a property's value; objects also kKey inside a property's name and kColon after it.
enum ContainerPhase : uint8_t { kOpen = 1, kKey, kColon, kAfterValue, kNext };

enum class Fed { kTaken, kRefused, kEnded };  // kEnded: a number ended before this byte

bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

Fed feed_number(Frame& f, bool integer, uint8_t c) {
  const auto go = [&](uint8_t phase, int32_t count) {
    f.phase = phase;
    f.count = count;
    return Fed::kTaken;
  };
  const bool exponent = !integer && (c == 'e' || c == 'E');
  switch (f.phase) {
    case kStart:
      if (c == '-') return go(kSign, 0);
      [[fallthrough]];
    case kSign:
      if (c == '0') return go(kZero, 1);
      return is_digit(c) ? go(kInt, 1) : Fed::kRefused;
    case kZero:
    case kInt:
      if (is_digit(c)) {
        return f.phase == kInt && f.count < kMaxDigits ? go(kInt, f.count + 1) : Fed::kRefused;
      }
      if (c == '.' && !integer) return go(kFracStart, 0);
      return exponent ? go(kExpStart, 0) : Fed::kEnded;
    case kFracStart:
      return is_digit(c) ? go(kFrac, 1) : Fed::kRefused;
    case kFrac:
      if (is_digit(c)) return f.count < kMaxDigits ? go(kFrac, f.count + 1) : Fed::kRefused;
      return exponent ? go(kExpStart, 0) : Fed::kEnded;
    case kExpStart:
      if (c == '+' || c == '-') return go(kExpSign, 0);
      [[fallthrough]];
    case kExpSign:
      return is_digit(c) ? go(kExp, 1) : Fed::kRefused;
    case kExp:
      if (is_digit(c)) return f.count < kMaxExponentDigits ? go(kExp, f.count + 1) : Fed::kRefused;
      return Fed::kEnded;
  }
  return Fed::kRefused;
}

// Of an object's properties from `from` on, those that may come next: each one up to and
// including the first required one (the optional ones before it may be skipped).
template <typename Visit>
void next_properties(const SchemaNode& node, int32_t from, Visit visit) {
  for (int32_t j = from; j < int32_t(node.properties.size()); ++j) {
    visit(j);
    if (node.properties[size_t(j)].required) return;
  }
}

bool only_optional_after(const SchemaNode& node, int32_t from) {
  return std::none_of(node.properties.begin() + from, node.properties.end(),
                      [](const Property& p) { return p.required; });
}

}  // namespace

bool MatchState::complete() const {
  for (int64_t i = 0; i < size_; ++i) {
    if (stacks_[size_t(i)].empty()) return true;
  }
  return false;
}

void MatchState::key(std::string& out) const {
  out.clear();
  for (int64_t i = 0; i < size_; ++i) {
    const Stack& s = stacks_[size_t(i)];
    const uint32_t depth = uint32_t(s.size());
    out.append(reinterpret_cast<const char*>(&depth), sizeof depth);
    out.append(reinterpret_cast<const char*>(s.data()), s.size() * sizeof(Frame));
  }
}

int64_t MatchState::add(const Stack& from) {
  if (size_ == int64_t(stacks_.size())) stacks_.emplace_back();
  stacks_[size_t(size_)].assign(from.begin(), from.end());
  return size_++;
}

void MatchState::compact(const std::vector<char>& kept) {
  const auto same = [](const Stack& a, const Stack& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(Frame)) == 0;
  };
  int64_t n = 0;
  for (int64_t i = 0; i < size_ && n < JsonMatcher::kMaxStacks; ++i) {
    if (!kept[size_t(i)]) continue;
    bool repeat = false;
    for (int64_t j = 0; j < n && !repeat; ++j)
      repeat = same(stacks_[size_t(j)], stacks_[size_t(i)]);
    if (repeat) continue;
    if (n != i) std::swap(stacks_[size_t(n)], stacks_[size_t(i)]);
    ++n;
  }
  size_ = n;
}

void JsonMatcher::start(MatchState& state) const {
  state.clear();
  state.add(Stack{Frame{}});
}

bool JsonMatcher::push(Stack& s, int32_t node) const {
  if (int64_t(s.size()) >= kMaxDepth) return false;
  s.push_back(Frame{.node = node});
  return true;
}

// A string's byte; a closing quote sets phase back to kStart, which the caller pops.
bool JsonMatcher::feed_string(Frame& f, const SchemaNode& node, uint8_t c) const {
  const auto character = [&](int32_t owed, uint8_t lo, uint8_t hi) {
    if (f.count >= node.max_length) return false;
    ++f.count;
    f.aux = owed;
    f.lo = lo;
    f.hi = hi;
    return true;
  };
  switch (f.phase) {
    case kStart:
      if (c != '"') return false;
      f.phase = kStringBody;
      return true;
    case kStringBody:
      if (f.aux > 0) {
        if (c < f.lo || c > f.hi) return false;
        --f.aux;
        f.lo = 0x80;
        f.hi = 0xBF;
        return true;
      }
      if (c == '"') {
        if (f.count < node.min_length) return false;
        f.phase = kStart;
        return true;
      }
      if (c == '\\') {
        if (!character(0, 0, 0)) return false;
        f.phase = kEscape;
        return true;
      }
      if (c < 0x20) return false;
      if (c < 0x80) return character(0, 0, 0);
      // UTF-8 as RFC 3629 allows it: no overlong forms, surrogates or code points past U+10FFFF.
      if (c >= 0xC2 && c <= 0xDF) return character(1, 0x80, 0xBF);
      if (c == 0xE0) return character(2, 0xA0, 0xBF);
      if (c == 0xED) return character(2, 0x80, 0x9F);
      if (c >= 0xE1 && c <= 0xEF) return character(2, 0x80, 0xBF);
      if (c == 0xF0) return character(3, 0x90, 0xBF);
      if (c >= 0xF1 && c <= 0xF3) return character(3, 0x80, 0xBF);
      if (c == 0xF4) return character(3, 0x80, 0x8F);
      return false;
    case kEscape:
      if (c == 'u') {
        f.phase = kHex;
        f.aux = 4;
        return true;
      }
      if (std::strchr("\"\\/bfnrt", c) == nullptr || c == 0) return false;
      f.phase = kStringBody;
      return true;
    case kHex:
      if (!is_hex(c)) return false;
      if (--f.aux == 0) f.phase = kStringBody;
      return true;
  }
  return false;
}

int64_t JsonMatcher::fork(int64_t slot, MatchState& out) {
  const int64_t t = out.add(out.stacks_[size_t(slot)]);
  if (kept_.size() <= size_t(t)) kept_.resize(size_t(t) + 1);
  kept_[size_t(t)] = 1;
  return t;
}

JsonMatcher::Step JsonMatcher::feed_literal(int64_t slot, uint8_t c, MatchState& out) {
  Stack& s = out.stacks_[size_t(slot)];
  Frame& f = s.back();
  const std::vector<std::string>& texts = grammar_->nodes[size_t(f.node)].literals;
  if (f.phase == kStart) {
    f.phase = kLiteralBody;
    f.index = 0;
    f.aux = int32_t(texts.size());
  }
  // The literals still possible share their first f.count bytes and, sorted, lie together.
  const auto takes = [&](int32_t i) {
    const std::string& t = texts[size_t(i)];
    return int32_t(t.size()) > f.count && uint8_t(t[size_t(f.count)]) == c;
  };
  int32_t lo = f.index;
  while (lo < f.aux && !takes(lo)) ++lo;
  int32_t hi = lo;
  while (hi < f.aux && takes(hi)) ++hi;
  if (lo == hi) return Step::kRefused;
  f.index = lo;
  f.aux = hi;
  ++f.count;
  if (int32_t(texts[size_t(lo)].size()) == f.count) {  // complete; longer ones may go on
    if (lo + 1 < hi) out.stacks_[size_t(fork(slot, out))].back().index = lo + 1;
    s.pop_back();
  }
  return Step::kTaken;
}

JsonMatcher::Step JsonMatcher::feed_array(Stack& s, uint8_t c) const {
  Frame& f = s.back();
  const SchemaNode& node = grammar_->nodes[size_t(f.node)];
  switch (f.phase) {
    case kStart:
      if (c != '[') return Step::kRefused;
      f.phase = kOpen;
      return Step::kTaken;
    case kOpen:
      if (c == ']') {
        if (node.min_items > 0) return Step::kRefused;
        s.pop_back();
        return Step::kTaken;
      }
      if (node.max_items == 0) return Step::kRefused;
      f.count = 1;
      f.phase = kAfterValue;
      return push(s, node.items) ? Step::kAgain : Step::kRefused;  // the item takes the byte
    case kAfterValue:
      if (c == ',' && f.count < node.max_items) {
        f.phase = kNext;
        return Step::kTaken;
      }
      if (c == ']' && f.count >= node.min_items) {
        s.pop_back();
        return Step::kTaken;
      }
      return Step::kRefused;
    case kNext:
      ++f.count;
      f.phase = kAfterValue;
      return push(s, node.items) ? Step::kAgain : Step::kRefused;
  }
  return Step::kRefused;
}

JsonMatcher::Step JsonMatcher::feed_object(int64_t slot, uint8_t c, MatchState& out) {
  Stack& s = out.stacks_[size_t(slot)];
  Frame& f = s.back();
  const SchemaNode& node = grammar_->nodes[size_t(f.node)];
  const auto taken_if = [](bool ok) { return ok ? Step::kTaken : Step::kRefused; };
  switch (f.phase) {
    case kStart:
      if (c != '{') return Step::kRefused;
      f.phase = kOpen;
      f.index = 0;
      return Step::kTaken;
    case kOpen:
    case kNext:
      if (c == '}' && f.phase == kOpen && (node.free || only_optional_after(node, 0))) {
        s.pop_back();
        return Step::kTaken;
      }
      if (c != '"') return Step::kRefused;
      if (node.free) {
        f.phase = kColon;
        if (!push(s, node.key_node)) return Step::kRefused;
        s.back().phase = kStringBody;
        return Step::kTaken;
      } else {
        // One reading per property that may come next, each inside its name's first byte.
        int32_t first = -1;
        next_properties(node, f.index, [&](int32_t j) {
          Frame& key = first < 0 ? f : out.stacks_[size_t(fork(slot, out))].back();
          if (first < 0) first = j;
          key.phase = kKey;
          key.index = j;
          key.count = 1;
        });
        return taken_if(first >= 0);
      }
    case kKey: {
      const std::string& key = node.properties[size_t(f.index)].key;
      if (uint8_t(key[size_t(f.count)]) != c) return Step::kRefused;
      if (++f.count == int32_t(key.size())) f.phase = kColon;
      return Step::kTaken;
    }
    case kColon:
      if (c != ':') return Step::kRefused;
      f.phase = kAfterValue;
      return taken_if(push(s, node.free ? node.value_node : node.properties[size_t(f.index)].node));
    case kAfterValue:
      if (c == ',') {
        if (!node.free && f.index + 1 >= int32_t(node.properties.size())) return Step::kRefused;
        f.phase = kNext;
        if (!node.free) ++f.index;
        return Step::kTaken;
      }
      if (c == '}' && (node.free || only_optional_after(node, f.index + 1))) {
        s.pop_back();
        return Step::kTaken;
      }
      return Step::kRefused;
  }
  return Step::kRefused;
}

bool JsonMatcher::feed(int64_t slot, uint8_t c, MatchState& out) {
  Stack& s = out.stacks_[size_t(slot)];
  while (!s.empty()) {
    Frame& f = s.back();
    const SchemaNode& node = grammar_->nodes[size_t(f.node)];
    Step step = Step::kRefused;
    switch (node.kind) {
      case NodeKind::kString:
        if (!feed_string(f, node, c)) return false;
        if (f.phase == kStart) s.pop_back();  // the closing quote
        return true;
      case NodeKind::kNumber: {
        const Fed fed = feed_number(f, node.integer, c);
        if (fed != Fed::kEnded) return fed == Fed::kTaken;
        s.pop_back();  // the number ended: the byte is its parent's
        continue;
      }
      case NodeKind::kAnyOf: {
        const std::vector<int32_t>& alternatives = node.alternatives;
        for (size_t i = 1; i < alternatives.size(); ++i) {
          const int64_t t = fork(slot, out);
          out.stacks_[size_t(t)].back() = Frame{.node = alternatives[i]};
          kept_[size_t(t)] = feed(t, c, out);
        }
        f = Frame{.node = alternatives[0]};
        continue;
      }
      case NodeKind::kLiterals:
        step = feed_literal(slot, c, out);
        break;
      case NodeKind::kArray:
        step = feed_array(s, c);
        break;
      case NodeKind::kObject:
        step = feed_object(slot, c, out);
        break;
    }
    if (step != Step::kAgain) return step == Step::kTaken;
  }
  return false;  // the value is complete: nothing may follow
}

int64_t JsonMatcher::string_room(const MatchState& state) const {
  if (state.size() != 1 || state[0].empty()) return -1;
  const Frame& f = state[0].back();
  const SchemaNode& node = grammar_->nodes[size_t(f.node)];
  if (node.kind != NodeKind::kString || f.phase != kStringBody || f.aux != 0) return -1;
  return node.max_length - f.count;
}

void JsonMatcher::advance(const MatchState& from, uint8_t byte, MatchState& to) {
  to.clear();
  for (int64_t i = 0; i < from.size(); ++i) {
    const int64_t slot = to.add(from[i]);
    if (kept_.size() <= size_t(slot)) kept_.resize(size_t(slot) + 1);
    kept_[size_t(slot)] = feed(slot, byte, to);
  }
  to.compact(kept_);
}

bool JsonMatcher::advance(MatchState& state, std::string_view bytes) {
  for (const char b : bytes) {
    advance(state, uint8_t(b), scratch_);
    std::swap(state.stacks_, scratch_.stacks_);
    std::swap(state.size_, scratch_.size_);
    if (state.empty()) return false;
  }
  return true;
}

bool matches(const JsonGrammar& grammar, std::string_view text) {
  JsonMatcher matcher(grammar);
  MatchState state;
  matcher.start(state);
  return matcher.advance(state, text) && state.complete();
}

}  // namespace tessera::grammar
