#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace tessera::serve {

// What a full KV block holds, named by its tokens and every token before it: a 128-bit chained
// hash, so two sequences find the same key for a block exactly when their prefixes up to the
// block's end agree. The block's own tokens are kept beside the key and compared on every hit.
struct BlockKey {
  uint64_t high = 0, low = 0;
  bool operator==(const BlockKey&) const = default;
};
// The key of the first block's parent.
inline constexpr BlockKey kRootBlockKey{0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull};
BlockKey chain_block_key(const BlockKey& parent, std::span<const int32_t> tokens);

// The ids of a paged KV cache's blocks: which are free, how many sequences share each, and, for
// prefix caching, which full blocks hold known content. A published block whose last user lets
// go keeps its content and stays findable until its room is needed; such cached blocks are
// reused least recently released first. Allocates only at construction and when publishing.
class BlockPool {
 public:
  BlockPool(int64_t blocks, int64_t block_tokens, bool prefix_caching);

  // A block for new content with one reference: a free one, else the least recently released
  // cached one, which is forgotten. nullopt when every block is referenced.
  std::optional<int32_t> take();
  // Drops a reference; at the last one a published block becomes cached, any other free.
  void release(int32_t block);
  // Records that the referenced, full block holds tokens after the prefix that key names. A
  // content already published by another block is left to that one.
  void publish(int32_t block, const BlockKey& key, std::span<const int32_t> tokens);
  // The block holding exactly this content, with a reference taken, or nullopt.
  std::optional<int32_t> find(const BlockKey& key, std::span<const int32_t> tokens);

  int64_t total() const { return int64_t(references_.size()); }
  // Blocks take() can give: free plus cached.
  int64_t available() const { return int64_t(free_.size()) + cached_; }
  int64_t cached() const { return cached_; }
  int references(int32_t block) const { return references_[block]; }
  bool prefix_caching() const { return prefix_caching_; }

 private:
  struct KeyHash {
    size_t operator()(const BlockKey& k) const { return size_t(k.low ^ (k.high >> 1)); }
  };
  void unlink(int32_t block);       // out of the cached list
  void push_newest(int32_t block);  // into the cached list, as the most recently released
  void forget(int32_t block);       // its content is no longer findable

  const int64_t block_tokens_;
  const bool prefix_caching_;
  std::vector<int32_t> free_;        // a stack: the most recently freed block is reused first
  std::vector<int32_t> references_;  // sequences holding each block
  std::vector<bool> published_;
  std::vector<BlockKey> keys_;
  std::vector<int32_t> tokens_;  // each published block's tokens, block_tokens per block
  std::unordered_map<BlockKey, int32_t, KeyHash> index_;
  // Unreferenced published blocks as a doubly linked list over block ids, oldest at head_.
  std::vector<int32_t> prev_, next_;
  int32_t head_ = -1, tail_ = -1;
  int64_t cached_ = 0;
};

}  // namespace tessera::serve
