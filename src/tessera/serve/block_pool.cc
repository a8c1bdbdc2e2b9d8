#include "tessera/serve/block_pool.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::serve {

namespace {

// SplitMix64's finaliser: every input bit reaches every output bit.
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> tokens) {
  // Two independent 64-bit chains, each folding in the parent's whole key and every token.
  uint64_t high = mix(parent.high ^ 0x632be59bd9b4e019ull) ^ parent.low;
  uint64_t low = mix(parent.low + 0x8cb92ba72f3d8dd7ull) ^ (parent.high << 1);
  for (const int32_t t : tokens) {
    high = mix(high + uint64_t(uint32_t(t)));
    low = mix(low ^ (uint64_t(uint32_t(t)) * 0xff51afd7ed558ccdull));
  }
  return {high, mix(low + tokens.size())};
}

BlockPool::BlockPool(int64_t blocks, int64_t block_tokens, bool prefix_caching)
    : block_tokens_(block_tokens),
      prefix_caching_(prefix_caching),
      references_(blocks, 0),
      published_(blocks, false),
      keys_(blocks),
      prev_(blocks, -1),
      next_(blocks, -1) {
  if (prefix_caching_) {
    tokens_.assign(blocks * block_tokens, 0);
    index_.reserve(blocks);
  }
  free_.reserve(blocks);
  for (int64_t b = blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

std::optional<int32_t> BlockPool::take() {
  int32_t block;
  if (!free_.empty()) {
    block = free_.back();
    free_.pop_back();
  } else if (head_ >= 0) {
    block = head_;
    unlink(block);
    forget(block);
  } else {
    return std::nullopt;
  }
  references_[block] = 1;
  return block;
}

void BlockPool::release(int32_t block) {
  check(references_[block] > 0, "KV cache: block {} released more often than it was taken", block);
  if (--references_[block] > 0) return;
  if (published_[block]) {
    push_newest(block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::publish(int32_t block, const BlockKey& key, std::span<const int32_t> tokens) {
  if (!prefix_caching_ || published_[block]) return;
  check(int64_t(tokens.size()) == block_tokens_ && references_[block] > 0,
        "KV cache: only a full, referenced block can be published");
  if (!index_.emplace(key, block).second) return;
  published_[block] = true;
  keys_[block] = key;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + block * block_tokens_);
}

std::optional<int32_t> BlockPool::find(const BlockKey& key, std::span<const int32_t> tokens) {
  if (!prefix_caching_) return std::nullopt;
  const auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  const int32_t block = it->second;
  if (!std::equal(tokens.begin(), tokens.end(), tokens_.begin() + block * block_tokens_)) {
    return std::nullopt;  // a hash collision: never share a block whose tokens differ
  }
  if (references_[block]++ == 0) unlink(block);
  return block;
}

void BlockPool::unlink(int32_t block) {
  (prev_[block] >= 0 ? next_[prev_[block]] : head_) = next_[block];
  (next_[block] >= 0 ? prev_[next_[block]] : tail_) = prev_[block];
  prev_[block] = next_[block] = -1;
  --cached_;
}

void BlockPool::push_newest(int32_t block) {
  prev_[block] = tail_;
  next_[block] = -1;
  (tail_ >= 0 ? next_[tail_] : head_) = block;
  tail_ = block;
  ++cached_;
}

void BlockPool::forget(int32_t block) {
  index_.erase(keys_[block]);
  published_[block] = false;
}

}  // namespace tessera::serve
