#include "tessera/runtime/decoder.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/model/serving_memory.h"

namespace tessera::runtime {

int64_t logit_rows(std::span<const DecodeChunk> chunks) {
  int64_t rows = 0;
  for (const DecodeChunk& c : chunks) rows += c.logits;
  return rows;
}

Decoder::Decoder(model::Transformer& model)
    : model_(model),
      chunks_(size_t(model.max_tokens())),
      logits_(size_t(model.max_tokens())),
      tokens_(size_t(model.max_tokens())),
      adapters_(size_t(model.max_tokens())),
      kv_(size_t(model::kv_rows(model.model_layout()).layers)) {
  tessera::check(!model.training(),
                 "decode: the model was built for training; build it with training=false");
  tessera::check(
      !model.tensor_parallel().sequence_parallel(),
      "decode runs every row on every tensor-parallel rank: build the inference model without "
      "sequence parallelism");
}

int64_t Decoder::check(const KvCacheView& cache, std::span<const DecodeChunk> chunks) const {
  const model::ModelConfig& c = model_.config();
  const int64_t layers = int64_t(kv_.size());
  tessera::check(int64_t(cache.k.size()) == layers && int64_t(cache.v.size()) == layers,
                 "decode: the cache holds {} key and {} value layers but the model has {}",
                 cache.k.size(), cache.v.size(), layers);
  tessera::check(cache.block_tokens >= 1, "decode: the cache's blocks hold {} tokens",
                 cache.block_tokens);
  tessera::check(!chunks.empty(), "decode: no sequences to run");
  int64_t N = 0;
  for (size_t s = 0; s < chunks.size(); ++s) {
    const DecodeChunk& d = chunks[s];
    tessera::check(d.n >= 1 && d.start >= 0, "decode: sequence {} has {} new tokens at position {}",
                   s, d.n, d.start);
    tessera::check(d.logits >= 1 && d.logits <= d.n,
                   "decode: sequence {} asks for the logits of {} of its {} new tokens", s,
                   d.logits, d.n);
    tessera::check(d.start + d.n <= c.max_seq,
                   "decode: sequence {} would reach {} tokens, past the model's context of {} "
                   "(model.max_seq)",
                   s, d.start + d.n, c.max_seq);
    tessera::check(int64_t(d.block_table.size()) * cache.block_tokens >= d.start + d.n,
                   "decode: sequence {} has {} blocks of {} tokens but needs room for {}; "
                   "reserve them in the cache first",
                   s, d.block_table.size(), cache.block_tokens, d.start + d.n);
    tessera::check(N + d.n <= model_.max_tokens(),
                   "decode: the chunks hold more than the {} tokens the model's buffers take",
                   model_.max_tokens());
    model_.check_tokens(d.tokens, d.n);
    const model::AdapterBank* bank = model_.options().adapters;
    tessera::check(d.adapter < 0 || (bank != nullptr && bank->holds(d.adapter)),
                   "decode: sequence {} asks for adapter slot {}, which holds no adapter", s,
                   d.adapter);
    N += d.n;
  }
  return N;
}

const float* Decoder::decode(const KvCacheView& cache, std::span<const DecodeChunk> chunks) {
  check(cache, chunks);
  const model::ModelConfig& c = model_.config();
  int64_t N = 0;
  for (size_t s = 0; s < chunks.size(); ++s) {
    const DecodeChunk& d = chunks[s];
    std::copy_n(d.tokens, d.n, tokens_.begin() + N);
    chunks_[s] = {d.block_table.data(), d.start, d.n, N};
    logits_[s] = d.logits;
    adapters_[s] = d.adapter;
    N += d.n;
  }
  const int64_t kv_heads = model::kv_rows(model_.model_layout()).row_width / c.head_dim();
  for (size_t l = 0; l < kv_.size(); ++l) {
    kv_[l] = {cache.k[l], cache.v[l], cache.block_tokens, kv_heads, c.head_dim(), cache.dtype};
  }
  const std::span<const int32_t> adapters =
      model_.options().adapters != nullptr
          ? std::span<const int32_t>(adapters_.data(), chunks.size())
          : std::span<const int32_t>();
  return model_.forward_paged(tokens_.data(), {chunks_.data(), chunks.size()},
                              {logits_.data(), chunks.size()}, kv_, N, adapters);
}

}  // namespace tessera::runtime
