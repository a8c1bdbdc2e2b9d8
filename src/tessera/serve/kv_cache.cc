#include "tessera/serve/kv_cache.h"

#include <limits>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::serve {

int64_t PagedKvCache::bytes_per_token(const model::ModelConfig& config) {
  return 2 * config.n_layer * config.kv_heads() * config.head_dim() * int64_t(sizeof(float));
}

PagedKvCache::PagedKvCache(const model::ModelConfig& config, int64_t capacity_tokens,
                           int64_t block_tokens)
    : layers_(config.n_layer),
      row_width_(config.kv_heads() * config.head_dim()),
      block_tokens_(block_tokens) {
  check(block_tokens_ >= 1, "KV cache: blocks must hold at least one token, got {}", block_tokens_);
  check(capacity_tokens >= 1, "KV cache: capacity must be at least one token, got {}",
        capacity_tokens);
  num_blocks_ = (capacity_tokens + block_tokens_ - 1) / block_tokens_;
  check(num_blocks_ <= std::numeric_limits<int32_t>::max(),
        "KV cache: {} blocks exceed the block table's int32 ids; use larger blocks", num_blocks_);
  const int64_t per_tensor = num_blocks_ * block_tokens_ * row_width_;
  storage_.assign(2 * layers_ * per_tensor, 0.0f);
  for (int64_t l = 0; l < layers_; ++l) {
    k_layers_.push_back(storage_.data() + 2 * l * per_tensor);
    v_layers_.push_back(storage_.data() + (2 * l + 1) * per_tensor);
  }
  free_blocks_.reserve(num_blocks_);
  for (int64_t b = num_blocks_ - 1; b >= 0; --b) free_blocks_.push_back(int32_t(b));
}

int64_t PagedKvCache::add_sequence() {
  sequences_.emplace(next_id_, Sequence{});
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
  for (int64_t i = 0; i < missing; ++i) {
    s.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return true;
}

void PagedKvCache::advance(int64_t seq, int64_t tokens) {
  Sequence& s = sequence(seq);
  check(tokens >= 0 && s.length + tokens <= int64_t(s.blocks.size()) * block_tokens_,
        "KV cache: sequence {} cannot grow by {} tokens from {}: only {} are reserved", seq, tokens,
        s.length, int64_t(s.blocks.size()) * block_tokens_);
  s.length += tokens;
}

void PagedKvCache::release(int64_t seq) {
  Sequence& s = sequence(seq);
  free_blocks_.insert(free_blocks_.end(), s.blocks.rbegin(), s.blocks.rend());
  sequences_.erase(seq);
}

model::DecodeChunk PagedKvCache::chunk(int64_t seq, std::span<const int32_t> tokens) const {
  const Sequence& s = sequence(seq);
  return {tokens.data(), int64_t(tokens.size()), s.length, s.blocks};
}

int64_t PagedKvCache::row_offset(int64_t seq, int64_t position) const {
  const Sequence& s = sequence(seq);
  check(position >= 0 && position < int64_t(s.blocks.size()) * block_tokens_,
        "KV cache: position {} is outside sequence {}'s {} reserved tokens", position, seq,
        int64_t(s.blocks.size()) * block_tokens_);
  return (int64_t(s.blocks[position / block_tokens_]) * block_tokens_ + position % block_tokens_) *
         row_width_;
}

float* PagedKvCache::k_row(int64_t layer, int64_t seq, int64_t position) {
  check(layer >= 0 && layer < layers_, "KV cache: layer {} of {}", layer, layers_);
  return k_layers_[layer] + row_offset(seq, position);
}

float* PagedKvCache::v_row(int64_t layer, int64_t seq, int64_t position) {
  check(layer >= 0 && layer < layers_, "KV cache: layer {} of {}", layer, layers_);
  return v_layers_[layer] + row_offset(seq, position);
}

}  // namespace tessera::serve
