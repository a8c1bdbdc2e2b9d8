// LayerNorm and RMSNorm on a CUDA device, forward and backward. The row statistics take one block
// per row (a grid-stride loop over rows), reducing in a fixed tree, and follow the CPU's formulas
// step for step: a two-pass biased variance, rstd = 1 / sqrt(var + eps) with IEEE sqrt and
// division, dx accumulated (+=). The parameter gradients are sums over rows, reduced without
// atomics so they repeat bit for bit: blocks of rows write per-column partials into the context's
// scratch buffer (fewer row blocks for wide rows, so they fit), then one pass per column adds the
// row blocks in order into dgamma (and dbeta). Rows are summed in a different order than the
// CPU's sequential walk, so the results agree with it to f32 rounding, not bit for bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/launch.cuh"
#include "tessera/kernels/cuda/resources.h"

namespace tessera::kernels::cuda {

namespace {

using launch::kColumnTile;
using launch::kTileRows;

constexpr int kThreads = 256;
constexpr launch::GridCap kGrid{kThreads, 4096};
constexpr float kLayerNormEps = float(1e-5);

__global__ void layernorm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                         float* y, float* mean, float* rstd, int64_t M, int64_t C) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const float* xr = x + m * C;
    float sum = 0;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) sum += xr[c];
    const float mu = launch::block_sum<kThreads>(sum) / float(C);
    float var = 0;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) var += (xr[c] - mu) * (xr[c] - mu);
    const float rs = 1.0f / sqrtf(launch::block_sum<kThreads>(var) / float(C) + kLayerNormEps);
    float* yr = y + m * C;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) {
      yr[c] = (xr[c] - mu) * rs * gamma[c] + beta[c];
    }
    if (threadIdx.x == 0) {
      mean[m] = mu;
      rstd[m] = rs;
    }
  }
}

__global__ void layernorm_backward_dx_kernel(const float* dy, const float* x, const float* gamma,
                                             const float* mean, const float* rstd, float* dx,
                                             int64_t M, int64_t C) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const float* dyr = dy + m * C;
    const float* xr = x + m * C;
    const float mu = mean[m], rs = rstd[m];
    float dxhat_sum = 0, dxhat_xhat_sum = 0;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) {
      const float dxhat = dyr[c] * gamma[c];
      dxhat_sum += dxhat;
      dxhat_xhat_sum += dxhat * (xr[c] - mu) * rs;
    }
    const float mean_dxhat = launch::block_sum<kThreads>(dxhat_sum) / float(C);
    const float mean_dxhat_xhat = launch::block_sum<kThreads>(dxhat_xhat_sum) / float(C);
    float* dxr = dx + m * C;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) {
      const float xhat = (xr[c] - mu) * rs;
      dxr[c] += rs * (dyr[c] * gamma[c] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
  }
}

__global__ void rmsnorm_forward_kernel(const float* x, const float* gamma, float* y, float* rstd,
                                       int64_t M, int64_t C, float eps) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const float* xr = x + m * C;
    float sum_sq = 0;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) sum_sq += xr[c] * xr[c];
    const float rs = 1.0f / sqrtf(launch::block_sum<kThreads>(sum_sq) / float(C) + eps);
    float* yr = y + m * C;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) yr[c] = xr[c] * rs * gamma[c];
    if (threadIdx.x == 0) rstd[m] = rs;
  }
}

__global__ void rmsnorm_backward_dx_kernel(const float* dy, const float* x, const float* gamma,
                                           const float* rstd, float* dx, int64_t M, int64_t C) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const float* dyr = dy + m * C;
    const float* xr = x + m * C;
    const float rs = rstd[m];
    float dxhat_xhat_sum = 0;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) {
      dxhat_xhat_sum += dyr[c] * gamma[c] * xr[c] * rs;
    }
    const float mean_dxhat_xhat = launch::block_sum<kThreads>(dxhat_xhat_sum) / float(C);
    float* dxr = dx + m * C;
    for (int64_t c = threadIdx.x; c < C; c += kThreads) {
      dxr[c] += rs * (dyr[c] * gamma[c] - xr[c] * rs * mean_dxhat_xhat);
    }
  }
}

// The per-element terms of the parameter gradients, summed over rows: dgamma and dbeta for
// LayerNorm, dgamma for RMSNorm.
struct LayerNormParamTerms {
  static constexpr int kCount = 2;
  const float *dy, *x, *mean, *rstd;
  __device__ void operator()(int64_t m, int64_t i, float* terms) const {
    terms[0] = dy[i] * (x[i] - mean[m]) * rstd[m];
    terms[1] = dy[i];
  }
};

struct RmsNormParamTerms {
  static constexpr int kCount = 1;
  const float *dy, *x, *rstd;
  __device__ void operator()(int64_t m, int64_t i, float* terms) const {
    terms[0] = dy[i] * x[i] * rstd[m];
  }
};

// The two passes of launch::column_sum_grid's column sums; term k of row block b and column c goes
// to partials[(k * row_blocks + b) * C + c].
template <typename Terms>
__global__ void param_grad_partials_kernel(Terms terms, int64_t M, int64_t C,
                                           int64_t rows_per_block, float* partials) {
  constexpr int kCount = Terms::kCount;
  __shared__ float tile[kCount][kTileRows][kColumnTile];
  const int64_t row_blocks = gridDim.y;
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_block;
  const int64_t r1 = std::min(M, r0 + rows_per_block);
  for (int64_t c0 = int64_t(blockIdx.x) * kColumnTile; c0 < C;
       c0 += int64_t(gridDim.x) * kColumnTile) {
    const int64_t c = c0 + threadIdx.x;
    float sums[kCount] = {};
    if (c < C) {
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) {
        float t[kCount];
        terms(r, r * C + c, t);
        for (int k = 0; k < kCount; ++k) sums[k] += t[k];
      }
    }
    for (int k = 0; k < kCount; ++k) tile[k][threadIdx.y][threadIdx.x] = sums[k];
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      for (int k = 0; k < kCount; ++k) {
        float total = 0;
        for (int j = 0; j < kTileRows; ++j) total += tile[k][j][threadIdx.x];
        partials[(k * row_blocks + blockIdx.y) * C + c] = total;
      }
    }
    __syncthreads();  // the tile is rewritten by the next columns
  }
}

struct Gradients {
  float* out[2];
};

template <int kCount>
__global__ void add_param_partials_kernel(const float* partials, int64_t row_blocks, int64_t C,
                                          Gradients grads) {
  for (int64_t c = launch::first_index(); c < C; c += launch::grid_stride()) {
#pragma unroll
    for (int k = 0; k < kCount; ++k) {
      float s = 0;
      for (int64_t b = 0; b < row_blocks; ++b) s += partials[(k * row_blocks + b) * C + c];
      grads.out[k][c] += s;
    }
  }
}

// grads.out[k][c] += the sum over the M rows of term k at column c.
template <typename Terms>
void accumulate_param_grads(const Context& ctx, const Terms& terms, int64_t M, int64_t C,
                            Gradients grads, const char* too_wide) {
  constexpr int kCount = Terms::kCount;
  const int64_t scratch_floats = int64_t(ctx.cuda->scratch_bytes / sizeof(float));
  require(kCount * C <= scratch_floats, too_wide);
  const launch::ColumnSumGrid split =
      launch::column_sum_grid(M, C, scratch_floats / (kCount * C), kGrid.max_blocks());
  float* partials = static_cast<float*>(ctx.cuda->scratch);
  param_grad_partials_kernel<<<split.grid, dim3(kColumnTile, kTileRows), 0, stream_of(ctx)>>>(
      terms, M, C, split.rows_per_block, partials);
  check_launch("param_grad_partials_kernel");
  add_param_partials_kernel<kCount>
      <<<kGrid.flat(C), kThreads, 0, stream_of(ctx)>>>(partials, split.row_blocks, C, grads);
  check_launch("add_param_partials_kernel");
}

void layernorm_forward(const Context& ctx, const float* x, const float* gamma, const float* beta,
                       float* y, float* mean, float* rstd, int64_t M, int64_t C) {
  require(M >= 0 && C >= 0, "layernorm_forward: sizes must not be negative");
  if (M == 0) return;
  require(C > 0, "layernorm_forward: rows of 0 channels have no statistics");
  layernorm_forward_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(x, gamma, beta, y,
                                                                              mean, rstd, M, C);
  check_launch("layernorm_forward_kernel");
}

void layernorm_backward(const Context& ctx, const float* dy, const float* x, const float* gamma,
                        const float* mean, const float* rstd, float* dx, float* dgamma,
                        float* dbeta, int64_t M, int64_t C) {
  require(M >= 0 && C >= 0, "layernorm_backward: sizes must not be negative");
  if (M == 0 || C == 0) return;
  layernorm_backward_dx_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(
      dy, x, gamma, mean, rstd, dx, M, C);
  check_launch("layernorm_backward_dx_kernel");
  accumulate_param_grads(ctx, LayerNormParamTerms{dy, x, mean, rstd}, M, C,
                         Gradients{{dgamma, dbeta}},
                         "layernorm_backward: C too wide for the reduction scratch buffer");
}

void rmsnorm_forward(const Context& ctx, const float* x, const float* gamma, float* y, float* rstd,
                     int64_t M, int64_t C, float eps) {
  require(M >= 0 && C >= 0, "rmsnorm_forward: sizes must not be negative");
  if (M == 0) return;
  require(C > 0, "rmsnorm_forward: rows of 0 channels have no statistics");
  rmsnorm_forward_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(x, gamma, y, rstd, M, C,
                                                                            eps);
  check_launch("rmsnorm_forward_kernel");
}

void rmsnorm_backward(const Context& ctx, const float* dy, const float* x, const float* gamma,
                      const float* rstd, float* dx, float* dgamma, int64_t M, int64_t C) {
  require(M >= 0 && C >= 0, "rmsnorm_backward: sizes must not be negative");
  if (M == 0 || C == 0) return;
  rmsnorm_backward_dx_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(dy, x, gamma, rstd,
                                                                                dx, M, C);
  check_launch("rmsnorm_backward_dx_kernel");
  accumulate_param_grads(ctx, RmsNormParamTerms{dy, x, rstd}, M, C, Gradients{{dgamma, nullptr}},
                         "rmsnorm_backward: C too wide for the reduction scratch buffer");
}

}  // namespace

void add_norm_kernels(Backend& backend) {
  backend.ops.layernorm_forward = layernorm_forward;
  backend.ops.layernorm_backward = layernorm_backward;
  backend.ops.rmsnorm_forward = rmsnorm_forward;
  backend.ops.rmsnorm_backward = rmsnorm_backward;
}

}  // namespace tessera::kernels::cuda
