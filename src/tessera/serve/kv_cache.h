#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "tessera/kernels/device.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/serving_memory.h"
#include "tessera/runtime/decoder.h"
#include "tessera/serve/block_pool.h"

namespace tessera::serve {

// The keys and values of every sequence being served, in one pool of fixed-size blocks
// allocated up front: each layer has K and V storage of [blocks][block_tokens] rows of kv_heads *
// head_dim values, in f32 or q8_0 (kernels::KvDtype). A sequence owns a block table (its blocks in
// position order) that grows a block at a time, so sequences of any length share the pool without
// copying and a finished one hands its blocks straight to the next.
//
// With prefix caching, every block a sequence fills is published under the key of its tokens and
// all before them; a new sequence whose prompt starts the same way takes those blocks into its
// table instead of recomputing them, and blocks whose sequences have ended stay findable until
// their room is needed. Shared blocks are full and never written again: a sequence writes only
// into blocks of its own, so sharing needs no copies.
class PagedKvCache {
 public:
  static constexpr int64_t kDefaultBlockTokens = model::kDefaultKvBlockTokens;

  // Room for capacity_tokens tokens in all, rounded up to whole blocks, of the key/value rows of
  // the served model's layout (its own heads on a tensor-parallel rank), in ctx's device memory
  // (the model's).
  PagedKvCache(const kernels::Context& ctx, const model::ModelLayout& layout,
               int64_t capacity_tokens, int64_t block_tokens = kDefaultBlockTokens,
               bool prefix_caching = false, kernels::KvDtype dtype = kernels::KvDtype::kF32);

  // Bytes one cached token takes: its keys and values in every layer.
  static int64_t bytes_per_token(const model::ModelLayout& layout, kernels::KvDtype dtype);

  // A new, empty sequence; ids are never reused. `adapter`: the slot of the served LoRA adapter
  // it runs with (-1: none), whose keys and values are its own: its blocks are published and
  // found under `adapter_key`, apart from every other adapter's (AdapterLease::key).
  int64_t add_sequence(int32_t adapter = -1, uint64_t adapter_key = 0);
  // Makes room for new_tokens more tokens after the sequence's length, taking free blocks as
  // needed. Returns false, changing nothing, when the pool has too few.
  bool reserve(int64_t seq, int64_t new_tokens);
  // Counts the tokens whose keys and values the model has just written into reserved room,
  // publishing each block they fill.
  void advance(int64_t seq, std::span<const int32_t> tokens);
  // Forgets the sequence's tokens from `length` on (speculated ones a verification refused);
  // their room stays reserved and is written again. Only without prefix caching, whose published
  // blocks never change.
  void truncate(int64_t seq, int64_t length);
  // For a sequence whose blocks are all full, appends cached blocks that hold the next tokens of
  // `tokens` (the sequence's whole token list), stopping before its last token, whose logits
  // still have to be computed. Returns how many tokens the sequence gained.
  int64_t attach_cached_prefix(int64_t seq, std::span<const int32_t> tokens);
  // Ends the sequence and returns its blocks to the pool.
  void release(int64_t seq);

  int64_t length(int64_t seq) const { return sequence(seq).length; }
  std::span<const int32_t> block_table(int64_t seq) const { return sequence(seq).blocks; }
  // The sequence's next chunk of tokens, to run through runtime::Decoder::decode after reserve.
  runtime::DecodeChunk chunk(int64_t seq, std::span<const int32_t> tokens) const;
  // What runtime::Decoder::decode reads and writes.
  runtime::KvCacheView view() const { return {k_layers_, v_layers_, block_tokens_, dtype_}; }
  // Key and value rows (kv_heads * head_dim values, as dtype holds them) of a cached position.
  uint8_t* k_row(int64_t layer, int64_t seq, int64_t position);
  uint8_t* v_row(int64_t layer, int64_t seq, int64_t position);

  int64_t block_tokens() const { return block_tokens_; }
  int64_t blocks_total() const { return num_blocks_; }
  // Blocks a sequence can take: free, or cached for a prefix nobody holds now.
  int64_t blocks_free() const { return pool_.available(); }
  // Blocks held by sequences; a block shared by several counts once.
  int64_t blocks_used() const { return num_blocks_ - blocks_free(); }
  int64_t blocks_cached() const { return pool_.cached(); }
  bool prefix_caching() const { return pool_.prefix_caching(); }
  int64_t bytes() const { return storage_.size(); }
  kernels::KvDtype dtype() const { return dtype_; }

 private:
  struct Sequence {
    std::vector<int32_t> blocks;
    int64_t length = 0;
    std::vector<int32_t> tokens;             // with prefix caching: the tokens written so far
    BlockKey last_full_key = kRootBlockKey;  // the key of its last full block
    int32_t adapter = -1;
  };
  const Sequence& sequence(int64_t seq) const;
  Sequence& sequence(int64_t seq);
  int64_t row_offset(int64_t seq, int64_t position) const;

  model::KvRows rows_;
  kernels::KvDtype dtype_;
  int64_t row_bytes_, block_tokens_, num_blocks_;
  kernels::DeviceArray<uint8_t> storage_;
  std::vector<void*> k_layers_, v_layers_;
  BlockPool pool_;
  std::unordered_map<int64_t, Sequence> sequences_;
  int64_t next_id_ = 0;
};

}  // namespace tessera::serve
