// Softmax cross-entropy on a CUDA device, whole rows (softmax_cross_entropy) and a vocabulary
// split over ranks (the vocab_shard_* passes), with the CPU's semantics: the loss is
// log(sum) + max - target logit, the gradient grad_scale * (softmax - onehot(target)) overwrites
// the logits, padding columns V..ld of a shard are left alone until its gradient pass zeroes them,
// and a target outside a shard contributes a zero target logit and no onehot. One block of
// kThreads owns one row (blocks stride over rows): thread t takes columns t, t + kThreads, ... in
// order and the block combines the threads in a fixed tree, so every row's max and sum repeat bit
// for bit, though their rounding differs from the CPU's vectorised order.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {

namespace {

constexpr int kThreads = 256;  // fixed: the reduction tree, hence each sum's rounding, follows it
constexpr launch::GridCap kGrid{kThreads, int64_t(1) << 16};

// row_max and exp_sum end in a barrier, which orders each thread's reads of the row before any
// thread's writes that follow.
__device__ float row_max(const float* __restrict__ row, int64_t V) {
  float best = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) best = fmaxf(best, row[v]);
  return launch::block_max<kThreads>(best);
}

// sum_v expf(row[v] - max); with keep_exponentials each logit is replaced by its exponential.
__device__ float exp_sum(float* __restrict__ row, int64_t V, float max, bool keep_exponentials) {
  float sum = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += kThreads) {
    const float e = expf(row[v] - max);
    if (keep_exponentials) row[v] = e;
    sum += e;
  }
  return launch::block_sum<kThreads>(sum);
}

// The gradient pass recomputes the exponentials rather than storing them in the sum pass, which
// saves a write of the row and gives the same bits. An ignored target gives loss 0 and a zero
// row; any other target outside [0, V) (which the CPU would read out of bounds) yields a NaN loss
// and no onehot, rather than a fault.
__global__ void softmax_cross_entropy_kernel(float* __restrict__ logits,
                                             const int32_t* __restrict__ targets,
                                             float* __restrict__ losses, int64_t M, int64_t V,
                                             float grad_scale) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    float* row = logits + m * V;
    const int64_t target = targets[m];
    if (target == kIgnoredTarget) {
      if (threadIdx.x == 0) losses[m] = 0.0f;
      if (grad_scale == 0.0f) continue;
      for (int64_t v = threadIdx.x; v < V; v += kThreads) row[v] = 0.0f;
      continue;
    }
    const bool target_here = target >= 0 && target < V;
    const float target_logit = target_here ? row[target] : NAN;
    const float max = row_max(row, V);
    const float sum = exp_sum(row, V, max, false);
    if (threadIdx.x == 0) losses[m] = logf(sum) + max - target_logit;
    if (grad_scale == 0.0f) continue;
    const float factor = grad_scale / sum;
    for (int64_t v = threadIdx.x; v < V; v += kThreads) {
      float g = expf(row[v] - max) * factor;
      if (v == target) g -= grad_scale;
      row[v] = g;
    }
  }
}

__global__ void vocab_shard_row_max_kernel(const float* __restrict__ logits, int64_t M, int64_t V,
                                           int64_t ld, float* __restrict__ max) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    const float best = row_max(logits + m * ld, V);
    if (threadIdx.x == 0) max[m] = best;
  }
}

__global__ void vocab_shard_exp_sums_kernel(
    float* __restrict__ logits, const float* __restrict__ max, const int32_t* __restrict__ targets,
    int64_t first, int64_t M, int64_t V, int64_t ld, float* __restrict__ sums,
    float* __restrict__ target_logits, bool keep_exponentials) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    float* row = logits + m * ld;
    if (threadIdx.x == 0) {
      const int64_t id = int64_t(targets[m]) - first;
      target_logits[m] = id >= 0 && id < V ? row[id] : 0.0f;
    }
    __syncthreads();  // the target logit is read before keep_exponentials overwrites it
    const float sum = exp_sum(row, V, max[m], keep_exponentials);
    if (threadIdx.x == 0) sums[m] = sum;
  }
}

__global__ void vocab_shard_softmax_grad_kernel(float* __restrict__ exponentials,
                                                const int32_t* __restrict__ targets, int64_t first,
                                                const float* __restrict__ sums, int64_t M,
                                                int64_t V, int64_t ld, float grad_scale) {
  for (int64_t m = blockIdx.x; m < M; m += gridDim.x) {
    float* row = exponentials + m * ld;
    const bool ignored = targets[m] == kIgnoredTarget;
    const int64_t id = int64_t(targets[m]) - first;
    const float factor = grad_scale / sums[m];
    for (int64_t v = threadIdx.x; v < ld; v += kThreads) {
      float g = 0.0f;
      if (v < V && !ignored) {
        g = row[v] * factor;
        if (v == id) g -= grad_scale;
      }
      row[v] = g;
    }
  }
}

void softmax_cross_entropy(const Context& ctx, float* logits, const int32_t* targets, float* losses,
                           int64_t M, int64_t V, float grad_scale) {
  if (M == 0) return;
  require(V > 0, "softmax_cross_entropy: needs at least one vocabulary column");
  softmax_cross_entropy_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(
      logits, targets, losses, M, V, grad_scale);
  check_launch("softmax_cross_entropy_kernel");
}

void vocab_shard_row_max(const Context& ctx, const float* logits, int64_t M, int64_t V, int64_t ld,
                         float* max) {
  if (M == 0) return;
  vocab_shard_row_max_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(logits, M, V, ld,
                                                                                max);
  check_launch("vocab_shard_row_max_kernel");
}

void vocab_shard_exp_sums(const Context& ctx, float* logits, const float* max,
                          const int32_t* targets, int64_t first, int64_t M, int64_t V, int64_t ld,
                          float* sums, float* target_logits, bool keep_exponentials) {
  if (M == 0) return;
  vocab_shard_exp_sums_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(
      logits, max, targets, first, M, V, ld, sums, target_logits, keep_exponentials);
  check_launch("vocab_shard_exp_sums_kernel");
}

void vocab_shard_softmax_grad(const Context& ctx, float* exponentials, const int32_t* targets,
                              int64_t first, const float* sums, int64_t M, int64_t V, int64_t ld,
                              float grad_scale) {
  if (M == 0) return;
  vocab_shard_softmax_grad_kernel<<<kGrid.per_row(M), kThreads, 0, stream_of(ctx)>>>(
      exponentials, targets, first, sums, M, V, ld, grad_scale);
  check_launch("vocab_shard_softmax_grad_kernel");
}

}  // namespace

void add_cross_entropy_kernels(Backend& backend) {
  backend.ops.softmax_cross_entropy = softmax_cross_entropy;
  backend.ops.vocab_shard_row_max = vocab_shard_row_max;
  backend.ops.vocab_shard_exp_sums = vocab_shard_exp_sums;
  backend.ops.vocab_shard_softmax_grad = vocab_shard_softmax_grad;
}

}  // namespace tessera::kernels::cuda
