// Where a model's parameters lie in GGUF, as llama.cpp's converter names and lays them out (the
// block spec's ExternalSlice gguf names): each GGUF tensor holds rows of one Tessera parameter.
// The export writes these tensors and the import reads them back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/model/block_spec.h"

namespace tessera::interop {

struct GgufSlice {
  std::string gguf;   // "blk.0.attn_q.weight"
  std::string param;  // "blocks.0.attn.qkv.weight"
  int64_t row = 0;    // the parameter's rows [row, row + rows) ...
  int64_t rows = -1;  // ... or -1: all of them
  // > 0: Llama's q or k rows of this many heads, each head's rows in interleaved pairs in GGUF
  // (gguf_rope_row).
  int64_t rope_heads = 0;
  bool vector = false;  // a norm's gain or shift, or a bias: stored whole, in f32
};

// Every parameter of `spec` as its GGUF tensors: the embeddings, each block in order, the head
// (not the copy of a tied head GPT-2 stores; ModelSpec::gguf_stores_tied_head). Throws naming a
// part GGUF has no tensor for.
std::vector<GgufSlice> gguf_slices(const model::ModelSpec& spec);

// The row of a head of `head` rows that GGUF's row r of it holds: llama.cpp's llama rotates
// interleaved pairs, so its row h head + 2 j + side is the rotate-half row h head + side head/2 +
// j.
inline int64_t gguf_rope_row(int64_t r, int64_t head) {
  return r / head * head + (r % 2) * (head / 2) + (r % head) / 2;
}

}  // namespace tessera::interop
