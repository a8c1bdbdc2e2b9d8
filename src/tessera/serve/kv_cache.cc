#include "tessera/serve/kv_cache.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/model/serving_memory.h"

namespace tessera::serve {

int64_t PagedKvCache::bytes_per_token(const model::ModelLayout& layout, kernels::KvDtype dtype) {
  return model::kv_rows(layout).bytes_per_token(dtype);
}

namespace {

int64_t checked_blocks(int64_t capacity_tokens, int64_t block_tokens) {
  check(block_tokens >= 1, "KV cache: blocks must hold at least one token, got {}", block_tokens);
  check(capacity_tokens >= 1, "KV cache: capacity must be at least one token, got {}",
        capacity_tokens);
  const int64_t blocks = (capacity_tokens + block_tokens - 1) / block_tokens;
  check(blocks <= std::numeric_limits<int32_t>::max(),
        "KV cache: {} blocks exceed the block table's int32 ids; use larger blocks", blocks);
  return blocks;
}

}  // namespace

PagedKvCache::PagedKvCache(const kernels::Context& ctx, const model::ModelLayout& layout,
                           int64_t capacity_tokens, int64_t block_tokens, bool prefix_caching,
                           kernels::KvDtype dtype)
    : rows_(model::kv_rows(layout)),
      dtype_(dtype),
      row_bytes_(kernels::kv_row_bytes(dtype, rows_.row_width)),
      block_tokens_(block_tokens),
      num_blocks_(checked_blocks(capacity_tokens, block_tokens)),
      pool_(num_blocks_, block_tokens, prefix_caching) {
  const int64_t per_tensor = num_blocks_ * block_tokens_ * row_bytes_;
  storage_ = kernels::DeviceArray<uint8_t>(ctx, 2 * rows_.layers * per_tensor);
  for (int64_t l = 0; l < rows_.layers; ++l) {
    k_layers_.push_back(storage_.data() + 2 * l * per_tensor);
    v_layers_.push_back(storage_.data() + (2 * l + 1) * per_tensor);
  }
}

int64_t PagedKvCache::add_sequence(int32_t adapter, uint64_t adapter_key) {
  Sequence s;
  s.adapter = adapter;
  if (adapter >= 0) {
    const std::array<int32_t, 2> salt = {int32_t(adapter_key >> 32), int32_t(adapter_key)};
    s.last_full_key = chain_block_key(kRootBlockKey, salt);
  }
  sequences_.emplace(next_id_, std::move(s));
  return next_id_++;
}

const PagedKvCache::Sequence& PagedKvCache::sequence(int64_t seq) const {
  const auto it = sequences_.find(seq);
  check(it != sequences_.end(), "KV cache: no sequence {} (never added, or released)", seq);
  return it->second;
}

PagedKvCache::Sequence& PagedKvCache::sequence(int64_t seq) {
  return const_cast<Sequence&>(std::as_const(*this).sequence(seq));
}

bool PagedKvCache::reserve(int64_t seq, int64_t new_tokens) {
  check(new_tokens >= 0, "KV cache: cannot reserve {} tokens", new_tokens);
  Sequence& s = sequence(seq);
  const int64_t needed_blocks = (s.length + new_tokens + block_tokens_ - 1) / block_tokens_;
  const int64_t missing = needed_blocks - int64_t(s.blocks.size());
  if (missing > blocks_free()) return false;
  for (int64_t i = 0; i < missing; ++i) s.blocks.push_back(*pool_.take());
  return true;
}

void PagedKvCache::advance(int64_t seq, std::span<const int32_t> tokens) {
  Sequence& s = sequence(seq);
  const int64_t n = int64_t(tokens.size());
  check(s.length + n <= int64_t(s.blocks.size()) * block_tokens_,
        "KV cache: sequence {} cannot grow by {} tokens from {}: only {} are reserved", seq, n,
        s.length, int64_t(s.blocks.size()) * block_tokens_);
  const int64_t full_before = s.length / block_tokens_;
  s.length += n;
  if (!pool_.prefix_caching()) return;
  s.tokens.insert(s.tokens.end(), tokens.begin(), tokens.end());
  for (int64_t b = full_before; b < s.length / block_tokens_; ++b) {
    const std::span<const int32_t> content(s.tokens.data() + b * block_tokens_, block_tokens_);
    s.last_full_key = chain_block_key(s.last_full_key, content);
    pool_.publish(s.blocks[b], s.last_full_key, content);
  }
}

void PagedKvCache::truncate(int64_t seq, int64_t length) {
  Sequence& s = sequence(seq);
  check(!pool_.prefix_caching(), "KV cache: a cache with prefix caching cannot be truncated");
  check(length >= 0 && length <= s.length,
        "KV cache: sequence {} holds {} tokens and cannot be truncated to {}", seq, s.length,
        length);
  s.length = length;
}

int64_t PagedKvCache::attach_cached_prefix(int64_t seq, std::span<const int32_t> tokens) {
  Sequence& s = sequence(seq);
  if (!pool_.prefix_caching() || s.length != int64_t(s.blocks.size()) * block_tokens_) return 0;
  check(int64_t(tokens.size()) >= s.length &&
            std::equal(s.tokens.begin(), s.tokens.end(), tokens.begin()),
        "KV cache: the tokens given for sequence {} do not start with the {} it holds", seq,
        s.length);
  const int64_t start = s.length;
  while (s.length + block_tokens_ < int64_t(tokens.size())) {
    const std::span<const int32_t> content(tokens.data() + s.length, block_tokens_);
    const BlockKey key = chain_block_key(s.last_full_key, content);
    const std::optional<int32_t> block = pool_.find(key, content);
    if (!block) break;
    s.blocks.push_back(*block);
    s.tokens.insert(s.tokens.end(), content.begin(), content.end());
    s.last_full_key = key;
    s.length += block_tokens_;
  }
  return s.length - start;
}

void PagedKvCache::release(int64_t seq) {
  Sequence& s = sequence(seq);
  // Last block first, so a sequence's later blocks are the first of its cached ones to go:
  // an earlier block is worth more, as every later one is reached through it.
  for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it) pool_.release(*it);
  sequences_.erase(seq);
}

runtime::DecodeChunk PagedKvCache::chunk(int64_t seq, std::span<const int32_t> tokens) const {
  const Sequence& s = sequence(seq);
  return {tokens.data(), int64_t(tokens.size()), s.length, s.blocks, 1, s.adapter};
}

int64_t PagedKvCache::row_offset(int64_t seq, int64_t position) const {
  const Sequence& s = sequence(seq);
  check(position >= 0 && position < int64_t(s.blocks.size()) * block_tokens_,
        "KV cache: position {} is outside sequence {}'s {} reserved tokens", position, seq,
        int64_t(s.blocks.size()) * block_tokens_);
  return kernels::kv_slot(s.blocks.data(), block_tokens_, position) * row_bytes_;
}

uint8_t* PagedKvCache::k_row(int64_t layer, int64_t seq, int64_t position) {
  check(layer >= 0 && layer < rows_.layers, "KV cache: layer {} of {}", layer, rows_.layers);
  return static_cast<uint8_t*>(k_layers_[layer]) + row_offset(seq, position);
}

uint8_t* PagedKvCache::v_row(int64_t layer, int64_t seq, int64_t position) {
  check(layer >= 0 && layer < rows_.layers, "KV cache: layer {} of {}", layer, rows_.layers);
  return static_cast<uint8_t*>(v_layers_[layer]) + row_offset(seq, position);
}

}  // namespace tessera::serve
