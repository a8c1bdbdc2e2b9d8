#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/model/model_config.h"
#include "tessera/model/transformer.h"

namespace tessera::serve {

// The keys and values of every sequence being served, in one pool of fixed-size blocks
// allocated up front: each layer has K and V storage of [blocks][block_tokens][kv_heads *
// head_dim] f32. A sequence owns a block table (its blocks in position order) that grows a block
// at a time, so sequences of any length share the pool without copying and a finished one hands
// its blocks straight to the next.
class PagedKvCache {
 public:
  static constexpr int64_t kDefaultBlockTokens = 16;

  // Room for capacity_tokens tokens in all, rounded up to whole blocks.
  PagedKvCache(const model::ModelConfig& config, int64_t capacity_tokens,
               int64_t block_tokens = kDefaultBlockTokens);

  // Bytes one cached token takes: its keys and values in every layer.
  static int64_t bytes_per_token(const model::ModelConfig& config);

  // A new, empty sequence; ids are never reused.
  int64_t add_sequence();
  // Makes room for new_tokens more tokens after the sequence's length, taking free blocks as
  // needed. Returns false, changing nothing, when the pool has too few.
  bool reserve(int64_t seq, int64_t new_tokens);
  // Counts tokens whose keys and values the model has written into reserved room.
  void advance(int64_t seq, int64_t tokens);
  // Ends the sequence and returns its blocks to the pool.
  void release(int64_t seq);

  int64_t length(int64_t seq) const { return sequence(seq).length; }
  std::span<const int32_t> block_table(int64_t seq) const { return sequence(seq).blocks; }
  // The sequence's next chunk of tokens, to run through Transformer::decode after reserve.
  model::DecodeChunk chunk(int64_t seq, std::span<const int32_t> tokens) const;
  // What Transformer::decode reads and writes.
  model::KvCacheView view() const { return {k_layers_, v_layers_, block_tokens_}; }
  // Key and value rows (kv_heads * head_dim floats) of a cached position.
  float* k_row(int64_t layer, int64_t seq, int64_t position);
  float* v_row(int64_t layer, int64_t seq, int64_t position);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t blocks_total() const { return num_blocks_; }
  int64_t blocks_free() const { return int64_t(free_blocks_.size()); }
  int64_t blocks_used() const { return num_blocks_ - blocks_free(); }
  int64_t bytes() const { return int64_t(storage_.size() * sizeof(float)); }

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
  };
  const Sequence& sequence(int64_t seq) const;
  Sequence& sequence(int64_t seq);
  int64_t row_offset(int64_t seq, int64_t position) const;

  int64_t layers_, row_width_, block_tokens_, num_blocks_;
  std::vector<float> storage_;
  std::vector<float*> k_layers_, v_layers_;
  std::vector<int32_t> free_blocks_;  // a stack: the most recently freed block is reused first
  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t next_id_ = 0;
};

}  // namespace tessera::serve
