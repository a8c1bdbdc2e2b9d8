// Causal grouped-query attention on a CUDA device, f32, flash-style: no T x T matrix is ever
// stored. One warp owns one output row and its 32 lanes split the head dimension (lane l holds
// channels l, l + 32, ...), so every score is a warp-wide dot product whose butterfly sum leaves
// the same bits in all lanes, and each key is visited in a fixed order: results repeat bit for bit
// and no atomics are needed. Forward runs an online softmax (running max and sum in f32) over keys
// j <= i (from the query's document start when documents are packed) and keeps only lse = max +
// log(sum) of the scaled scores, exactly the CPU's lse. Backward has no forward output, so it
// recomputes the probabilities from lse: a kernel per query row finds D_i = sum_j P_ij dP_ij in one
// pass over its keys and dq_i in a second, leaving D in the scratch; a kernel per key row then
// gathers dk_j and dv_j over the query heads of its group and the queries i >= j that see it, so
// every gradient row has a single owner that writes it. Each score is thus computed three times in
// backward: this is the plain reference a tensor-core kernel is to replace, and it favours clarity
// over speed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/launch.cuh"
#include "tessera/kernels/cuda/resources.h"

namespace tessera::kernels::cuda {

namespace {

using launch::kWarpSize;
using launch::lane_id;

constexpr int kWarpsPerBlock = 4;
constexpr int kBlockThreads = kWarpsPerBlock * kWarpSize;
constexpr int kMaxHeadDim = 256;  // eight channels per lane
// The grid is capped and the kernels stride over rows, a warp each, so any row count launches.
constexpr launch::GridCap kGrid{kWarpsPerBlock, int64_t(1) << 20};

// A head vector spread over the warp, kPerLane channels per lane; channels past hd hold 0.
template <int kPerLane>
struct HeadVector {
  float x[kPerLane];

  __device__ void load(const float* __restrict__ p, int hd) {
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * kWarpSize + lane_id();
      x[c] = d < hd ? p[d] : 0.0f;
    }
  }
  __device__ void zero() {
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) x[c] = 0.0f;
  }
  __device__ void store(float* __restrict__ p, int hd, float factor) const {
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * kWarpSize + lane_id();
      if (d < hd) p[d] = x[c] * factor;
    }
  }
  // Both backward kernels take q . k with one side here and the other in memory; the products
  // commute, so they compute the same score bits.
  __device__ float dot(const float* __restrict__ p, int hd) const {
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * kWarpSize + lane_id();
      if (d < hd) sum += x[c] * p[d];
    }
    return launch::warp_sum(sum);
  }
  // x = x * rescale + weight * p
  __device__ void scale_add(float rescale, float weight, const float* __restrict__ p, int hd) {
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int d = c * kWarpSize + lane_id();
      if (d < hd) x[c] = x[c] * rescale + weight * p[d];
    }
  }
};

// Where a batch's rows sit in qkv[B, T, (H + 2*KVH) * hd] and out/dout[B, T, H * hd], and the
// first key each query sees (doc_start[B, T], or 0 for all when null).
struct Layout {
  int64_t T, H, KVH;
  int hd;
  float scale;
  const int32_t* doc_start;

  __host__ __device__ int64_t group() const { return H / KVH; }
  __host__ __device__ int64_t ld() const { return (H + 2 * KVH) * hd; }
  __host__ __device__ int64_t out_ld() const { return H * hd; }
  __device__ const float* q(const float* qkv, int64_t b, int64_t h, int64_t i) const {
    return qkv + (b * T + i) * ld() + h * hd;
  }
  __device__ const float* k(const float* qkv, int64_t b, int64_t g, int64_t j) const {
    return qkv + (b * T + j) * ld() + (H + g) * hd;
  }
  __device__ const float* v(const float* qkv, int64_t b, int64_t g, int64_t j) const {
    return k(qkv, b, g, j) + KVH * hd;
  }
  __device__ int64_t first_key(int64_t b, int64_t i) const {
    return doc_start != nullptr ? doc_start[b * T + i] : 0;
  }
};

// One warp per (b, h, i), w = (b * H + h) * T + i, which is also lse's index. The running max
// starts at -inf and the first key replaces it with rescale expf(-inf) = 0, so key 0 needs no
// special case; a key that raises the max rescales what came before, any other adds
// expf(s - max), which keeps every exponent <= 0.
template <int kPerLane>
__global__ void attention_forward_kernel(const float* __restrict__ qkv, float* __restrict__ out,
                                         float* __restrict__ lse, int64_t B, Layout L) {
  const int64_t rows = B * L.H * L.T;
  for (int64_t w = launch::first_warp<kWarpsPerBlock>(); w < rows;
       w += launch::warp_stride<kWarpsPerBlock>()) {
    const int64_t i = w % L.T, h = w / L.T % L.H, b = w / (L.T * L.H), g = h / L.group();
    HeadVector<kPerLane> q, acc;
    q.load(L.q(qkv, b, h, i), L.hd);
    acc.zero();
    float max = -INFINITY, sum = 0.0f;
    for (int64_t j = L.first_key(b, i); j <= i; ++j) {
      const float s = L.scale * q.dot(L.k(qkv, b, g, j), L.hd);
      float rescale = 1.0f, p = 1.0f;
      if (s > max) {
        rescale = expf(max - s);
        max = s;
      } else {
        p = expf(s - max);
      }
      sum = sum * rescale + p;
      acc.scale_add(rescale, p, L.v(qkv, b, g, j), L.hd);
    }
    if (lane_id() == 0) lse[w] = max + logf(sum);
    acc.store(out + (b * L.T + i) * L.out_ld() + h * L.hd, L.hd, 1.0f / sum);
  }
}

// One warp per query row (b, h, i). P_ij = expf(scale q_i.k_j - lse_i) as the CPU recomputes it;
// the first pass sums D_i = sum_j P_ij dP_ij with dP_ij = dO_i . v_j, the second gathers
// dq_i = scale * sum_j P_ij (dP_ij - D_i) k_j. D_i goes to D[w] for the key kernel.
template <int kPerLane>
__global__ void attention_dq_kernel(const float* __restrict__ dout, const float* __restrict__ qkv,
                                    const float* __restrict__ lse, float* __restrict__ dqkv,
                                    float* __restrict__ D, int64_t B, Layout L) {
  const int64_t rows = B * L.H * L.T;
  for (int64_t w = launch::first_warp<kWarpsPerBlock>(); w < rows;
       w += launch::warp_stride<kWarpsPerBlock>()) {
    const int64_t i = w % L.T, h = w / L.T % L.H, b = w / (L.T * L.H), g = h / L.group();
    HeadVector<kPerLane> q, dO, dq;
    q.load(L.q(qkv, b, h, i), L.hd);
    dO.load(dout + (b * L.T + i) * L.out_ld() + h * L.hd, L.hd);
    const float row_lse = lse[w];
    float d_i = 0.0f;
    const int64_t first = L.first_key(b, i);
    for (int64_t j = first; j <= i; ++j) {
      const float p = expf(L.scale * q.dot(L.k(qkv, b, g, j), L.hd) - row_lse);
      d_i += p * dO.dot(L.v(qkv, b, g, j), L.hd);
    }
    dq.zero();
    for (int64_t j = first; j <= i; ++j) {
      const float* k = L.k(qkv, b, g, j);
      const float p = expf(L.scale * q.dot(k, L.hd) - row_lse);
      const float ds = p * (dO.dot(L.v(qkv, b, g, j), L.hd) - d_i);
      dq.scale_add(1.0f, ds, k, L.hd);
    }
    dq.store(dqkv + (b * L.T + i) * L.ld() + h * L.hd, L.hd, L.scale);
    if (lane_id() == 0) D[w] = d_i;
  }
}

// One warp per key row (b, g, j): dv_j = sum P_ij dO_i and dk_j = scale * sum dS_ij q_i over the
// group's query heads h (in order) and the queries i >= j that see key j (in order). Sole owner
// of its dk and dv rows, it writes them; the CPU's first head of a group writes with beta 0 and
// the others add, which ends the same.
template <int kPerLane>
__global__ void attention_dkv_kernel(const float* __restrict__ dout, const float* __restrict__ qkv,
                                     const float* __restrict__ lse, const float* __restrict__ D,
                                     float* __restrict__ dqkv, int64_t B, Layout L) {
  const int64_t rows = B * L.KVH * L.T;
  for (int64_t w = launch::first_warp<kWarpsPerBlock>(); w < rows;
       w += launch::warp_stride<kWarpsPerBlock>()) {
    const int64_t j = w % L.T, g = w / L.T % L.KVH, b = w / (L.T * L.KVH);
    HeadVector<kPerLane> k, v, dk, dv;
    k.load(L.k(qkv, b, g, j), L.hd);
    v.load(L.v(qkv, b, g, j), L.hd);
    dk.zero();
    dv.zero();
    for (int64_t h = g * L.group(); h < (g + 1) * L.group(); ++h) {
      const int64_t stats = (b * L.H + h) * L.T;  // lse's and D's row (b, h, 0)
      // First keys do not decrease along a row: the queries that see key j end at the first
      // whose document starts after it.
      for (int64_t i = j; i < L.T && L.first_key(b, i) <= j; ++i) {
        const float* q = L.q(qkv, b, h, i);
        const float* dO = dout + (b * L.T + i) * L.out_ld() + h * L.hd;
        const float p = expf(L.scale * k.dot(q, L.hd) - lse[stats + i]);
        const float ds = p * (v.dot(dO, L.hd) - D[stats + i]);
        dv.scale_add(1.0f, p, dO, L.hd);
        dk.scale_add(1.0f, ds, q, L.hd);
      }
    }
    float* dk_row = dqkv + (b * L.T + j) * L.ld() + (L.H + g) * L.hd;
    dk.store(dk_row, L.hd, L.scale);
    dv.store(dk_row + L.KVH * L.hd, L.hd, 1.0f);
  }
}

// The CPU's checks and scale (1 / sqrt(float(hd)), bit for bit); nothing when there is no work.
std::optional<Layout> make_layout(const char* heads_message, const char* head_dim_message,
                                  int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd,
                                  const int32_t* doc_start) {
  require(KVH > 0 && H % KVH == 0, heads_message);
  if (B == 0 || T_ == 0 || H == 0) return std::nullopt;
  require(hd > 0 && hd <= kMaxHeadDim, head_dim_message);
  return Layout{T_, H, KVH, int(hd), 1.0f / std::sqrt(float(hd)), doc_start};
}

void attention_forward(const Context& ctx, const float* qkv, float* out, float* lse, float*,
                       int64_t B, int64_t T_, int64_t H, int64_t KVH, int64_t hd,
                       const int32_t* doc_start, const QueryChunks& queries) {
  require(queries.count == 0,
          "attention_forward: query chunks (context parallelism) run on the CPU backend");
  const std::optional<Layout> L =
      make_layout("attention_forward: the query heads must share the key/value heads evenly",
                  "attention_forward: head_dim must be 1 to 256", B, T_, H, KVH, hd, doc_start);
  if (!L) return;
  launch::with_channels_per_lane(hd, [&](auto per_lane) {
    attention_forward_kernel<decltype(per_lane)::value>
        <<<kGrid.flat(B * H * T_), kBlockThreads, 0, stream_of(ctx)>>>(qkv, out, lse, B, *L);
    check_launch("attention_forward_kernel");
  });
}

// D takes H * T floats per batch in the scratch, so batches go in passes of as many as fit. A
// pass's kernels are queued on the context's stream, which runs the next pass's writes to D
// (and any later kernel's use of the scratch) only after they finish.
void attention_backward(const Context& ctx, const float* dout, const float* qkv, const float* lse,
                        float* dqkv, float*, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                        int64_t hd, const int32_t* doc_start, const QueryChunks& queries) {
  require(queries.count == 0,
          "attention_backward: query chunks (context parallelism) run on the CPU backend");
  const std::optional<Layout> L =
      make_layout("attention_backward: the query heads must share the key/value heads evenly",
                  "attention_backward: head_dim must be 1 to 256", B, T_, H, KVH, hd, doc_start);
  if (!L) return;
  const int64_t batches_per_pass = int64_t(ctx.cuda->scratch_bytes / sizeof(float)) / (H * T_);
  require(batches_per_pass > 0,
          "attention_backward: H * T floats (one batch's D) must fit in the CUDA scratch");
  float* D = static_cast<float*>(ctx.cuda->scratch);
  const int64_t ld = L->ld(), C = L->out_ld();
  for (int64_t b0 = 0; b0 < B; b0 += batches_per_pass) {
    const int64_t nb = std::min(batches_per_pass, B - b0);
    const float* pass_qkv = qkv + b0 * T_ * ld;
    const float* pass_dout = dout + b0 * T_ * C;
    const float* pass_lse = lse + b0 * H * T_;
    float* pass_dqkv = dqkv + b0 * T_ * ld;
    Layout pass = *L;
    if (pass.doc_start != nullptr) pass.doc_start += b0 * T_;
    launch::with_channels_per_lane(hd, [&](auto per_lane) {
      attention_dq_kernel<decltype(per_lane)::value>
          <<<kGrid.flat(nb * H * T_), kBlockThreads, 0, stream_of(ctx)>>>(
              pass_dout, pass_qkv, pass_lse, pass_dqkv, D, nb, pass);
      check_launch("attention_dq_kernel");
      attention_dkv_kernel<decltype(per_lane)::value>
          <<<kGrid.flat(nb * KVH * T_), kBlockThreads, 0, stream_of(ctx)>>>(
              pass_dout, pass_qkv, pass_lse, D, pass_dqkv, nb, pass);
      check_launch("attention_dkv_kernel");
    });
  }
}

}  // namespace

void add_attention_kernels(Backend& backend) {
  backend.ops.attention_forward = attention_forward;
  backend.ops.attention_backward = attention_backward;
}

}  // namespace tessera::kernels::cuda
