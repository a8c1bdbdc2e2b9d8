// The decoder: a model built for inference run incrementally over a paged key/value cache, in
// chunks (a prompt, or a piece of one, then one token at a time), many sequences per call.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/kernels/paged_attention.h"
#include "tessera/model/transformer.h"

namespace tessera::runtime {

// Keys and values of earlier tokens, one k and one v pointer per layer of the model, each laid
// out as kernels::PagedKv describes for `dtype`. The serving layer's cache owns the storage and
// the block tables.
struct KvCacheView {
  std::span<void*const> k, v;
  int64_t block_tokens = 0;
  kernels::KvDtype dtype = kernels::KvDtype::kF32;
};

// One sequence's next n tokens, at positions [start, start + n): start is how many of its tokens
// the cache already holds, and block_table lists the blocks that hold positions [0, start + n),
// the new ones included. logits: how many of the chunk's last rows get next-token logits, 1 to n
// (more than 1 to verify drafted tokens: the logits after each of them).
struct DecodeChunk {
  const int32_t* tokens = nullptr;
  int64_t n = 0, start = 0;
  std::span<const int32_t> block_table;
  int64_t logits = 1;
  int32_t adapter = -1;  // the slot of the served adapter the sequence runs with; -1: the base
};

// The rows of logits a decode of these chunks returns: the sum of their `logits`.
int64_t logit_rows(std::span<const DecodeChunk> chunks);

class Decoder {
 public:
  // `model` is built for inference, without sequence parallelism, and outlives the decoder.
  explicit Decoder(model::Transformer& model);

  // Runs each sequence's chunk, writes the chunk's keys and values into the cache, and returns
  // the next-token logits after each chunk's last `logits` tokens, chunk after chunk,
  // [logit_rows(chunks), layout's vocab.local]:
  // the whole vocabulary on one rank, this rank's slice of it over tensor-parallel ranks, which
  // all run the same chunks over a cache of their own key/value heads (kv_rows of the model's
  // layout). A pipeline stage without the embedding reads its input rows, [N, C] for the chunks'
  // N tokens, from input(); one without the head returns its output rows, [N, C], for the next
  // stage. The chunks hold at most the model's max_tokens() in all, and no position reaches
  // model.max_seq. Each chunk runs with its adapter, on a model that serves adapters.
  const float* decode(const KvCacheView& cache, std::span<const DecodeChunk> chunks);
  // Throws what decode would throw for these chunks before it runs anything (so that ranks that
  // exchange rows around a decode all fail before the first exchange); returns their tokens.
  int64_t check(const KvCacheView& cache, std::span<const DecodeChunk> chunks) const;

  float* input() { return model_.stage_input(0); }
  model::Transformer& model() { return model_; }

 private:
  model::Transformer& model_;
  std::vector<kernels::PagedChunk> chunks_;  // of the call in progress
  std::vector<int64_t> logits_;              // its chunks' logit rows
  std::vector<int32_t> tokens_;              // its chunks' tokens, one after another
  std::vector<int32_t> adapters_;            // its chunks' served adapters
  std::vector<kernels::PagedKv> kv_;         // [layer]
};

}  // namespace tessera::runtime
