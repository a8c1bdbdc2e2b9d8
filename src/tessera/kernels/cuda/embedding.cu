// Token and position embeddings on a CUDA device: the GPT-2 embedding (token row plus learned
// position row), a vocabulary shard's embedding for tensor parallelism, and the position rows
// added on their own, each with its backward. Kernels put channels on x and rows on y of a
// capped grid, so every warp reads and writes adjacent channels of one row. The forwards and the
// position gradients match the CPU bit for bit: a position's gradient is owned by one thread per
// channel that adds its rows t, t + T, t + 2T, ... in the CPU's order, without atomics. Token
// gradients are scattered with float atomicAdd, since any rows may share a token: their sums are
// the CPU's to f32 rounding, in an order that can change from run to run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {

namespace {

using launch::first_index;
using launch::grid_stride;

constexpr int kThreads = 256;
constexpr launch::GridCap kGrid{kThreads, 4096};

__global__ void embedding_forward_kernel(const int32_t* tokens, const float* wte, const float* wpe,
                                         float* x, int64_t rows, int64_t T, int64_t C) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* tok = wte + int64_t(tokens[r]) * C;
    float* out = x + r * C;
    if (wpe == nullptr) {
      for (int64_t c = first_index(); c < C; c += grid_stride()) out[c] = tok[c];
      continue;
    }
    const float* pos = wpe + (r % T) * C;
    for (int64_t c = first_index(); c < C; c += grid_stride()) out[c] = tok[c] + pos[c];
  }
}

__global__ void vocab_shard_embedding_forward_kernel(const int32_t* tokens, const float* wte,
                                                     int64_t first, int64_t count, float* x,
                                                     int64_t N, int64_t C) {
  for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
    const int64_t id = int64_t(tokens[r]) - first;
    float* out = x + r * C;
    if (id >= 0 && id < count) {
      const float* row = wte + id * C;
      for (int64_t c = first_index(); c < C; c += grid_stride()) out[c] = row[c];
    } else {
      for (int64_t c = first_index(); c < C; c += grid_stride()) out[c] = 0.0f;
    }
  }
}

__global__ void position_embedding_forward_kernel(const float* wpe, float* x, int64_t first_row,
                                                  int64_t rows, int64_t T, int64_t C) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* pos = wpe + ((first_row + r) % T) * C;
    float* out = x + r * C;
    for (int64_t c = first_index(); c < C; c += grid_stride()) out[c] += pos[c];
  }
}

// dwte[tokens[r] - first] += dx[r] for the rows whose token lies in [first, first + count).
__global__ void token_gradient_kernel(const float* dx, const int32_t* tokens, float* dwte,
                                      int64_t first, int64_t count, int64_t N, int64_t C) {
  for (int64_t r = blockIdx.y; r < N; r += gridDim.y) {
    const int64_t id = int64_t(tokens[r]) - first;
    if (id < 0 || id >= count) continue;
    const float* d = dx + r * C;
    float* row = dwte + id * C;
    for (int64_t c = first_index(); c < C; c += grid_stride()) atomicAdd(&row[c], d[c]);
  }
}

// dwpe[p] += dx[r] for every row r with (first_row + r) % T == p: rows r0, r0 + T, ... in order.
__global__ void position_gradient_kernel(const float* dx, float* dwpe, int64_t first_row,
                                         int64_t rows, int64_t T, int64_t C) {
  for (int64_t p = blockIdx.y; p < T; p += gridDim.y) {
    const int64_t r0 = ((p - first_row) % T + T) % T;
    if (r0 >= rows) continue;
    float* pos = dwpe + p * C;
    for (int64_t c = first_index(); c < C; c += grid_stride()) {
      float acc = pos[c];
      for (int64_t r = r0; r < rows; r += T) acc += dx[r * C + c];
      pos[c] = acc;
    }
  }
}

void accumulate_token_gradients(const Context& ctx, const float* dx, const int32_t* tokens,
                                float* dwte, int64_t first, int64_t count, int64_t N, int64_t C) {
  token_gradient_kernel<<<kGrid.row_grid(N, C), kThreads, 0, stream_of(ctx)>>>(dx, tokens, dwte,
                                                                               first, count, N, C);
  check_launch("token_gradient_kernel");
}

void accumulate_position_gradients(const Context& ctx, const float* dx, float* dwpe,
                                   int64_t first_row, int64_t rows, int64_t T, int64_t C) {
  position_gradient_kernel<<<kGrid.row_grid(std::min(T, rows), C), kThreads, 0, stream_of(ctx)>>>(
      dx, dwpe, first_row, rows, T, C);
  check_launch("position_gradient_kernel");
}

void embedding_forward(const Context& ctx, const int32_t* tokens, const float* wte,
                       const float* wpe, float* x, int64_t B, int64_t T_, int64_t C) {
  require(B >= 0 && T_ >= 0 && C >= 0, "embedding_forward: sizes must not be negative");
  if (B * T_ == 0 || C == 0) return;
  embedding_forward_kernel<<<kGrid.row_grid(B * T_, C), kThreads, 0, stream_of(ctx)>>>(
      tokens, wte, wpe, x, B * T_, T_, C);
  check_launch("embedding_forward_kernel");
}

void embedding_backward(const Context& ctx, const float* dx, const int32_t* tokens, float* dwte,
                        float* dwpe, int64_t B, int64_t T_, int64_t C) {
  require(B >= 0 && T_ >= 0 && C >= 0, "embedding_backward: sizes must not be negative");
  if (B * T_ == 0 || C == 0) return;
  // The whole vocabulary is one shard, and the ids are checked already.
  accumulate_token_gradients(ctx, dx, tokens, dwte, 0, std::numeric_limits<int64_t>::max(), B * T_,
                             C);
  if (dwpe != nullptr) accumulate_position_gradients(ctx, dx, dwpe, 0, B * T_, T_, C);
}

void vocab_shard_embedding_forward(const Context& ctx, const int32_t* tokens, const float* wte,
                                   int64_t first, int64_t count, float* x, int64_t N, int64_t C) {
  require(N >= 0 && C >= 0 && count >= 0,
          "vocab_shard_embedding_forward: sizes must not be negative");
  if (N == 0 || C == 0) return;
  vocab_shard_embedding_forward_kernel<<<kGrid.row_grid(N, C), kThreads, 0, stream_of(ctx)>>>(
      tokens, wte, first, count, x, N, C);
  check_launch("vocab_shard_embedding_forward_kernel");
}

void vocab_shard_embedding_backward(const Context& ctx, const float* dx, const int32_t* tokens,
                                    float* dwte, int64_t first, int64_t count, int64_t N,
                                    int64_t C) {
  require(N >= 0 && C >= 0 && count >= 0,
          "vocab_shard_embedding_backward: sizes must not be negative");
  if (N == 0 || C == 0 || count == 0) return;
  accumulate_token_gradients(ctx, dx, tokens, dwte, first, count, N, C);
}

void position_embedding_forward(const Context& ctx, const float* wpe, float* x, int64_t first_row,
                                int64_t rows, int64_t T_, int64_t C) {
  require(rows >= 0 && C >= 0, "position_embedding_forward: sizes must not be negative");
  if (rows == 0 || C == 0) return;
  require(T_ > 0, "position_embedding_forward: needs T > 0 positions");
  position_embedding_forward_kernel<<<kGrid.row_grid(rows, C), kThreads, 0, stream_of(ctx)>>>(
      wpe, x, first_row, rows, T_, C);
  check_launch("position_embedding_forward_kernel");
}

void position_embedding_backward(const Context& ctx, const float* dx, float* dwpe,
                                 int64_t first_row, int64_t rows, int64_t T_, int64_t C) {
  require(rows >= 0 && C >= 0, "position_embedding_backward: sizes must not be negative");
  if (rows == 0 || C == 0) return;
  require(T_ > 0, "position_embedding_backward: needs T > 0 positions");
  accumulate_position_gradients(ctx, dx, dwpe, first_row, rows, T_, C);
}

}  // namespace

void add_embedding_kernels(Backend& backend) {
  backend.ops.embedding_forward = embedding_forward;
  backend.ops.embedding_backward = embedding_backward;
  backend.ops.vocab_shard_embedding_forward = vocab_shard_embedding_forward;
  backend.ops.vocab_shard_embedding_backward = vocab_shard_embedding_backward;
  backend.ops.position_embedding_forward = position_embedding_forward;
  backend.ops.position_embedding_backward = position_embedding_backward;
}

}  // namespace tessera::kernels::cuda
