// Attention over keys and values kept in a paged cache, for serving: each sequence's earlier
// tokens sit in fixed-size blocks listed by its block table, so sequences grow a block at a time
// and never move. Forward only; the cache in f32 or in q8_0 blocks.
#pragma once

#include <cstdint>

#include "tessera/core/enum_names.h"
#include "tessera/kernels/context.h"

namespace tessera::kernels {

// How the cache holds a row of keys or values: f32, or ggml's q8_0 (blocks of 32 values, each an
// f16 scale, max|x| / 127, and 32 int8 values rounded to nearest; 34 bytes for 128 in f32), each
// head's head_dim values (a multiple of 32) in blocks of its own. Attention reads a q8_0 row block
// by block, never widening more than the row it multiplies.
enum class KvDtype { kF32, kQ8_0 };
inline constexpr EnumName<KvDtype> kKvDtypeNames[] = {{KvDtype::kF32, "f32"},
                                                      {KvDtype::kQ8_0, "q8_0"}};
constexpr const auto& enum_names(KvDtype) { return kKvDtypeNames; }

// Bytes of a row of `width` keys or values (kv_heads * head_dim) held as `dtype`.
int64_t kv_row_bytes(KvDtype dtype, int64_t width);

// Keys and values of one layer: k and v are [blocks][block_tokens] rows of kv_heads * head_dim
// values held as dtype, row p of a sequence living in block block_table[p / block_tokens] at slot
// p % block_tokens.
struct PagedKv {
  void *k, *v;
  int64_t block_tokens, kv_heads, head_dim;
  KvDtype dtype = KvDtype::kF32;
};

// Where position p of a sequence lives in the cache's rows: block block_table[p / block_tokens],
// slot p % block_tokens.
inline int64_t kv_slot(const int32_t* block_table, int64_t block_tokens, int64_t p) {
  return int64_t(block_table[p / block_tokens]) * block_tokens + p % block_tokens;
}

// One sequence's chunk of n new tokens at positions [start, start + n): its queries are rows
// [row, row + n) of the query and output buffers, and block_table covers [0, start + n).
struct PagedChunk {
  const int32_t* block_table;
  int64_t start, n, row;
};

// Stores the chunk's keys and values (k and v rows i at k + i * ld, v + i * ld) at its positions.
void paged_kv_write(const Context& ctx, const float* k, const float* v, int64_t ld,
                    const PagedKv& kv, const PagedChunk& chunk);

// For every chunk and query head h (reading key/value head h / (H / kv_heads)), causal attention
// of each query over positions [0, its own] with scale 1/sqrt(head_dim): query i of head h is read
// at q + i * ldq + h * head_dim and written at out + i * ldo + h * head_dim. The chunk's keys and
// values must already be written. scratch: paged_attention_scratch_size(max_context) floats for
// each of omp_get_max_threads() threads, max_context bounding every start + n.
int64_t paged_attention_scratch_size(int64_t max_context);
void paged_attention_forward(const Context& ctx, const float* q, int64_t ldq, float* out,
                             int64_t ldo, const PagedKv& kv, const PagedChunk* chunks,
                             int64_t num_chunks, int64_t H, float* scratch, int64_t max_context);

}  // namespace tessera::kernels
