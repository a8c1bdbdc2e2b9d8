// Attention over the paged key/value cache on a CUDA device, f32, forward only, with the CPU's
// semantics: query i of a chunk attends causally to positions [0, start + i] of its sequence,
// scale 1/sqrt(head_dim), query head h reading key/value head h / (H / kv_heads). The chunks and
// their block tables are host memory (the serving layer's), so each launcher packs what its
// kernel needs into ctx.cuda->host_words and sends it with one copy into ctx.cuda->scratch. One
// warp owns one (query row, head) and its lanes split the head dimension; the softmax is online
// (running max and sum in f32) over the positions in order, so results repeat bit for bit.
//
// Reusing the scratch is safe without host synchronisation: every pack is copied on the
// context's stream, which starts the copy only after the kernels queued before it (a previous
// paged_kv_write or attention reading the scratch) have finished. And the copy's source may be
// overwritten as soon as cudaMemcpyAsync returns: from pageable memory the runtime stages the
// words into its own pinned buffer before returning.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/launch.cuh"
#include "tessera/kernels/cuda/resources.h"

namespace tessera::kernels::cuda {

namespace {

using launch::ceil_div;
using launch::kWarpSize;

constexpr int kWarpsPerBlock = 4;
constexpr int kBlockThreads = kWarpsPerBlock * kWarpSize;
constexpr int kMaxHeadDim = 256;  // eight channels per lane
constexpr launch::GridCap kGrid{kWarpsPerBlock, int64_t(1) << 20};

// Each chunk with queries is described to the device by these int64 words; its block table
// follows all the descriptions as int32 entries, as the serving layer stores it.
enum ChunkWord { kStart, kRow, kFirstQuery, kTableAt, kChunkWords };

// Copies the host words to the scratch on the context's stream (see the file comment for why
// neither side needs a synchronisation).
void send_words(const Context& ctx, const std::vector<int64_t>& words, int64_t count,
                const char* too_large) {
  require(size_t(count) * sizeof(int64_t) <= ctx.cuda->scratch_bytes, too_large);
  check_cuda(cudaMemcpyAsync(ctx.cuda->scratch, words.data(), size_t(count) * sizeof(int64_t),
                             cudaMemcpyHostToDevice, stream_of(ctx)),
             "cudaMemcpyAsync (paged attention's host words)");
}

// host_words keeps its largest size, so a serving loop stops allocating.
std::vector<int64_t>& host_words(const Context& ctx, int64_t count) {
  std::vector<int64_t>& words = ctx.cuda->host_words;
  if (words.size() < size_t(count)) words.resize(size_t(count));
  return words;
}

// One block per chunk row, threads over the row's kv_heads * head_dim values; offsets[i] is where
// row i lands in k and v.
__global__ void paged_kv_write_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                      int64_t ld, float* __restrict__ k_cache,
                                      float* __restrict__ v_cache,
                                      const int64_t* __restrict__ offsets, int64_t n, int64_t W) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    float* k_to = k_cache + offsets[i];
    float* v_to = v_cache + offsets[i];
    for (int64_t c = threadIdx.x; c < W; c += kBlockThreads) {
      k_to[c] = k[i * ld + c];
      v_to[c] = v[i * ld + c];
    }
  }
}

// What a warp needs to find its keys and values.
struct Cache {
  const float *k, *v;
  int64_t block_tokens, W;  // W = kv_heads * head_dim, one position's row
  int hd;
  int64_t group;  // query heads per key/value head
  float scale;
};

// The chunk holding flat query index `query`: the last one whose first query is at most it, the
// first queries rising strictly since only chunks with queries are described.
__device__ const int64_t* chunk_of(const int64_t* chunks, int64_t num_chunks, int64_t query) {
  int64_t lo = 0, hi = num_chunks - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (chunks[mid * kChunkWords + kFirstQuery] <= query) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return chunks + lo * kChunkWords;
}

// One warp per (query, head), w = query * H + h, queries numbered through the chunks in order.
// Lane l holds channels l, l + 32, ... of q and of the running output. The running max starts at
// -inf and the first position replaces it with rescale expf(-inf) = 0; a position that raises the
// max rescales what came before, any other adds expf(s - max), which keeps every exponent <= 0.
template <int kPerLane>
__global__ void paged_attention_kernel(const float* __restrict__ q, int64_t ldq,
                                       float* __restrict__ out, int64_t ldo, Cache cache,
                                       const int64_t* __restrict__ chunks, int64_t num_chunks,
                                       const int32_t* __restrict__ tables, int64_t queries,
                                       int64_t H) {
  const int lane = launch::lane_id();
  const int hd = cache.hd;
  for (int64_t w = launch::first_warp<kWarpsPerBlock>(); w < queries * H;
       w += launch::warp_stride<kWarpsPerBlock>()) {
    const int64_t query = w / H, h = w % H;
    const int64_t* chunk = chunk_of(chunks, num_chunks, query);
    const int64_t i = query - chunk[kFirstQuery], r = chunk[kRow] + i;
    const int64_t context = chunk[kStart] + i + 1;
    const int32_t* table = tables + chunk[kTableAt];
    const int64_t head_at = h / cache.group * hd, bt = cache.block_tokens;
    float qr[kPerLane], acc[kPerLane];
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * kWarpSize + lane;
      qr[c] = d < hd ? q[r * ldq + h * hd + d] : 0.0f;
      acc[c] = 0.0f;
    }
    float max = -INFINITY, sum = 0.0f;
    for (int64_t p0 = 0; p0 < context; p0 += bt) {
      const int64_t block_at = int64_t(table[p0 / bt]) * bt * cache.W + head_at;
      const int64_t m = std::min(bt, context - p0);
      for (int64_t j = 0; j < m; ++j) {
        const float* k = cache.k + block_at + j * cache.W;
        const float* v = cache.v + block_at + j * cache.W;
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) {
          const int d = c * kWarpSize + lane;
          if (d < hd) dot += qr[c] * k[d];
        }
        const float s = cache.scale * launch::warp_sum(dot);
        float rescale = 1.0f, p = 1.0f;
        if (s > max) {
          rescale = expf(max - s);
          max = s;
        } else {
          p = expf(s - max);
        }
        sum = sum * rescale + p;
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) {
          const int d = c * kWarpSize + lane;
          if (d < hd) acc[c] = acc[c] * rescale + p * v[d];
        }
      }
    }
    const float inv = 1.0f / sum;  // as the CPU: the weighted sum times the reciprocal
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * kWarpSize + lane;
      if (d < hd) out[r * ldo + h * hd + d] = acc[c] * inv;
    }
  }
}

// The chunk's block table goes to the device already resolved: one word per row, the offset of
// its position in k and v.
void paged_kv_write(const Context& ctx, const float* k, const float* v, int64_t ld,
                    const PagedKv& kv, const PagedChunk& chunk) {
  const int64_t n = chunk.n, W = kv.kv_heads * kv.head_dim, bt = kv.block_tokens;
  if (n == 0 || W == 0) return;
  require(bt > 0, "paged_kv_write: block_tokens must be positive");
  require(kv.dtype == KvDtype::kF32, "paged_kv_write: the CUDA backend holds the KV cache in f32");
  std::vector<int64_t>& words = host_words(ctx, n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = chunk.start + i;
    words[size_t(i)] = kv_slot(chunk.block_table, bt, p) * W;
  }
  send_words(ctx, words, n, "paged_kv_write: the chunk's row offsets must fit in the CUDA scratch");
  paged_kv_write_kernel<<<kGrid.per_row(n), kBlockThreads, 0, stream_of(ctx)>>>(
      k, v, ld, static_cast<float*>(kv.k), static_cast<float*>(kv.v),
      static_cast<const int64_t*>(ctx.cuda->scratch), n, W);
  check_launch("paged_kv_write_kernel");
}

// The scratch holds the descriptions of the chunks with queries (kChunkWords each), then their
// block tables as int32, each covering [0, start + n) as the contract promises.
void paged_attention_forward(const Context& ctx, const float* q, int64_t ldq, float* out,
                             int64_t ldo, const PagedKv& kv, const PagedChunk* chunks,
                             int64_t num_chunks, int64_t H, float*, int64_t max_context) {
  require(kv.kv_heads > 0 && H % kv.kv_heads == 0,
          "paged_attention_forward: the query heads must share the key/value heads evenly");
  require(kv.block_tokens > 0, "paged_attention_forward: block_tokens must be positive");
  require(kv.dtype == KvDtype::kF32,
          "paged_attention_forward: the CUDA backend holds the KV cache in f32");
  int64_t described = 0, queries = 0, table_entries = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    const PagedChunk& chunk = chunks[c];
    require(chunk.start + chunk.n <= max_context,
            "paged_attention_forward: a chunk reaches past max_context");
    if (chunk.n == 0) continue;
    ++described;
    queries += chunk.n;
    table_entries += ceil_div(chunk.start + chunk.n, kv.block_tokens);
  }
  if (queries == 0 || H == 0) return;
  require(kv.head_dim > 0 && kv.head_dim <= kMaxHeadDim,
          "paged_attention_forward: head_dim must be 1 to 256");

  const int64_t table_words = (table_entries + 1) / 2;  // two int32 entries per word
  std::vector<int64_t>& words = host_words(ctx, described * kChunkWords + table_words);
  char* tables = reinterpret_cast<char*>(words.data() + described * kChunkWords);
  int64_t slot = 0, first_query = 0, table_at = 0;
  for (int64_t c = 0; c < num_chunks; ++c) {
    const PagedChunk& chunk = chunks[c];
    if (chunk.n == 0) continue;
    int64_t* description = words.data() + slot * kChunkWords;
    description[kStart] = chunk.start;
    description[kRow] = chunk.row;
    description[kFirstQuery] = first_query;
    description[kTableAt] = table_at;
    const int64_t entries = ceil_div(chunk.start + chunk.n, kv.block_tokens);
    std::memcpy(tables + table_at * sizeof(int32_t), chunk.block_table,
                size_t(entries) * sizeof(int32_t));
    ++slot;
    first_query += chunk.n;
    table_at += entries;
  }
  send_words(ctx, words, described * kChunkWords + table_words,
             "paged_attention_forward: the chunks and block tables must fit in the CUDA scratch");

  const int64_t* device_chunks = static_cast<const int64_t*>(ctx.cuda->scratch);
  const auto* device_tables =
      reinterpret_cast<const int32_t*>(device_chunks + described * kChunkWords);
  const Cache cache{static_cast<const float*>(kv.k),
                    static_cast<const float*>(kv.v),
                    kv.block_tokens,
                    kv.kv_heads * kv.head_dim,
                    int(kv.head_dim),
                    H / kv.kv_heads,
                    1.0f / std::sqrt(float(kv.head_dim))};
  const unsigned blocks = kGrid.flat(queries * H);
  launch::with_channels_per_lane(kv.head_dim, [&](auto per_lane) {
    paged_attention_kernel<decltype(per_lane)::value><<<blocks, kBlockThreads, 0, stream_of(ctx)>>>(
        q, ldq, out, ldo, cache, device_chunks, described, device_tables, queries, H);
    check_launch("paged_attention_kernel");
  });
}

}  // namespace

void add_paged_attention_kernels(Backend& backend) {
  backend.paged_kv_write = paged_kv_write;
  backend.paged_attention_forward = paged_attention_forward;
}

}  // namespace tessera::kernels::cuda
