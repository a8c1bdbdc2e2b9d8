// Elementwise kernels of the CUDA backend (GELU, SwiGLU, add, scale, bias, AdamW, the bf16/f16
// casts) and its reductions: the sum of squares and the finiteness test, which return a value to
// the host through the pinned staging buffer, and the column sums of a linear layer's bias
// gradient. Flat kernels are grid-stride loops over a capped grid; row-shaped ones put columns on
// x and rows on y, so one long row (a decoding step) and many short ones both fill the device.
// Reductions never use atomics: how the work splits into blocks depends only on the sizes, each
// block reduces in a fixed tree and a second kernel adds the blocks' partials in block order, so
// results repeat bit for bit across runs and devices, though their rounding differs from the
// CPU's chunked order. The casts round by hand on the bit patterns, exactly as the CPU does.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/column_sums.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/launch.cuh"
#include "tessera/kernels/cuda/resources.h"
#include "tessera/kernels/half_bits.h"

namespace tessera::kernels::cuda {

namespace {

using launch::first_index;
using launch::grid_stride;
using launch::kColumnTile;
using launch::kTileRows;

constexpr int kThreads = 256;
constexpr launch::GridCap kGrid{kThreads, 4096};

// The CPU's GELU constants, rounded to float as the CPU's T(...) does.
constexpr float kSqrt2OverPi = float(0.7978845608028654);
constexpr float kGeluCubic = float(0.044715);
constexpr float kGeluCubicSlope = float(3 * 0.044715);

// A value a kernel left in device memory, brought back through the pinned staging buffer.
template <typename T>
T read_back(const Context& ctx, const T* device_value) {
  void* staging = ctx.cuda->staging;
  check_cuda(
      cudaMemcpyAsync(staging, device_value, sizeof(T), cudaMemcpyDeviceToHost, stream_of(ctx)),
      "cudaMemcpyAsync (reduction result)");
  check_cuda(cudaStreamSynchronize(stream_of(ctx)), "cudaStreamSynchronize (reduction result)");
  T value;
  std::memcpy(&value, staging, sizeof(T));
  return value;
}

// The CPU's tanh, 1 - 2 / (exp(2u) + 1), rather than tanhf: for negative inputs GELU's value is
// 1 + tanh(u), a cancellation whose rounding this form reproduces and tanhf would not.
__device__ float tanh_as_cpu(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    y[i] = 0.5f * xi * (1.0f + tanh_as_cpu(u));
  }
}

__global__ void gelu_backward_kernel(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float xi = x[i];
    const float u = kSqrt2OverPi * (xi + kGeluCubic * xi * xi * xi);
    const float t = tanh_as_cpu(u);
    const float du = kSqrt2OverPi * (1.0f + kGeluCubicSlope * xi * xi);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * xi * (1.0f - t * t) * du);
  }
}

__global__ void swiglu_forward_kernel(const float* gate_up, float* out, int64_t M, int64_t F) {
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
    const float* gate = gate_up + m * 2 * F;
    const float* up = gate + F;
    for (int64_t f = first_index(); f < F; f += grid_stride()) {
      const float g = gate[f];
      out[m * F + f] = g / (1.0f + expf(-g)) * up[f];
    }
  }
}

__global__ void swiglu_backward_kernel(const float* dout, const float* gate_up, float* dgate_up,
                                       int64_t M, int64_t F) {
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
    const float* gate = gate_up + m * 2 * F;
    const float* up = gate + F;
    float* dgate = dgate_up + m * 2 * F;
    float* dup = dgate + F;
    for (int64_t f = first_index(); f < F; f += grid_stride()) {
      const float g = gate[f], d = dout[m * F + f];
      const float sig = 1.0f / (1.0f + expf(-g));
      dgate[f] = d * up[f] * sig * (1.0f + g * (1.0f - sig));
      dup[f] = d * g * sig;
    }
  }
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) x[i] *= factor;
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t M, int64_t C) {
  for (int64_t m = blockIdx.y; m < M; m += gridDim.y) {
    for (int64_t c = first_index(); c < C; c += grid_stride()) y[m * C + c] += b[c];
  }
}

// The host's double-precision step constants, rounded to float as the CPU rounds them.
struct AdamWStep {
  float lr, b1, one_minus_b1, b2, one_minus_b2, eps, decay, bias1, bias2_sqrt;
};

__device__ float adamw_apply(const AdamWStep& s, float param, float g, float* m, float* v) {
  const float mi = s.b1 * *m + s.one_minus_b1 * g;
  const float vi = s.b2 * *v + s.one_minus_b2 * g * g;
  *m = mi;
  *v = vi;
  return param * s.decay - s.lr * (mi * s.bias1) / (sqrtf(vi) * s.bias2_sqrt + s.eps);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWStep s) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    param[i] = adamw_apply(s, param[i], grad[i], m + i, v + i);
  }
}

template <LowPrecision P>
__global__ void adamw_low_kernel(float* master, const float* grad, const uint16_t* grad_bf16,
                                 float grad_scale, float* m, float* v, int64_t n, AdamWStep s,
                                 uint16_t* params_low) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const float g = grad != nullptr ? grad[i] : half_bits::f32_from_bf16(grad_bf16[i]);
    const float w = adamw_apply(s, master[i], g * grad_scale, m + i, v + i);
    master[i] = w;
    params_low[i] =
        P == LowPrecision::kBf16 ? half_bits::bf16_from_f32(w) : half_bits::f16_from_f32(w);
  }
}

template <LowPrecision P>
__global__ void cast_to_low_kernel(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    y[i] =
        P == LowPrecision::kBf16 ? half_bits::bf16_from_f32(x[i]) : half_bits::f16_from_f32(x[i]);
  }
}

template <LowPrecision P>
__global__ void cast_from_low_kernel(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    y[i] =
        P == LowPrecision::kBf16 ? half_bits::f32_from_bf16(x[i]) : half_bits::f32_from_f16(x[i]);
  }
}

// found stays 0 unless some block sees an inf or NaN; every writer stores the same 1.
__global__ void find_non_finite_kernel(const float* x, int64_t n, int* found) {
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones only for inf and NaN
  bool non_finite = false;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    non_finite = non_finite || (__float_as_uint(x[i]) & kExponent) == kExponent;
  }
  if (__syncthreads_or(non_finite) && threadIdx.x == 0) *found = 1;
}

__global__ void sum_squares_partials_kernel(const float* x, int64_t n, double* partials) {
  double s = 0;
  for (int64_t i = first_index(); i < n; i += grid_stride()) s += double(x[i]) * double(x[i]);
  s = launch::block_sum<kThreads>(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// One block adds the partials, each thread every kThreads-th in order, then the fixed tree.
__global__ void sum_partials_kernel(const double* partials, int64_t count, double* total) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
  s = launch::block_sum<kThreads>(s);
  if (threadIdx.x == 0) *total = s;
}

// The two passes of launch::column_sum_grid's column sums.
__global__ void column_sum_partials_kernel(const float* x, int64_t M, int64_t N,
                                           int64_t rows_per_block, float* partials) {
  __shared__ float tile[kTileRows][kColumnTile];
  const int64_t r0 = int64_t(blockIdx.y) * rows_per_block;
  const int64_t r1 = std::min(M, r0 + rows_per_block);
  for (int64_t c0 = int64_t(blockIdx.x) * kColumnTile; c0 < N;
       c0 += int64_t(gridDim.x) * kColumnTile) {
    const int64_t c = c0 + threadIdx.x;
    float s = 0;
    if (c < N) {
      for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) s += x[r * N + c];
    }
    tile[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < N) {
      float total = 0;
      for (int k = 0; k < kTileRows; ++k) total += tile[k][threadIdx.x];
      partials[int64_t(blockIdx.y) * N + c] = total;
    }
    __syncthreads();  // the tile is rewritten by the next columns
  }
}

__global__ void add_column_partials_kernel(const float* partials, int64_t row_blocks, int64_t N,
                                           float* sums) {
  for (int64_t c = first_index(); c < N; c += grid_stride()) {
    float s = 0;
    for (int64_t b = 0; b < row_blocks; ++b) s += partials[b * N + c];
    sums[c] += s;
  }
}

void gelu_forward(const Context& ctx, const float* x, float* y, int64_t n) {
  require(n >= 0, "gelu_forward: n must not be negative");
  if (n == 0) return;
  gelu_forward_kernel<<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(x, y, n);
  check_launch("gelu_forward_kernel");
}

void gelu_backward(const Context& ctx, const float* dy, const float* x, float* dx, int64_t n) {
  require(n >= 0, "gelu_backward: n must not be negative");
  if (n == 0) return;
  gelu_backward_kernel<<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(dy, x, dx, n);
  check_launch("gelu_backward_kernel");
}

void swiglu_forward(const Context& ctx, const float* gate_up, float* out, int64_t M, int64_t F) {
  require(M >= 0 && F >= 0, "swiglu_forward: sizes must not be negative");
  if (M == 0 || F == 0) return;
  swiglu_forward_kernel<<<kGrid.row_grid(M, F), kThreads, 0, stream_of(ctx)>>>(gate_up, out, M, F);
  check_launch("swiglu_forward_kernel");
}

void swiglu_backward(const Context& ctx, const float* dout, const float* gate_up, float* dgate_up,
                     int64_t M, int64_t F) {
  require(M >= 0 && F >= 0, "swiglu_backward: sizes must not be negative");
  if (M == 0 || F == 0) return;
  swiglu_backward_kernel<<<kGrid.row_grid(M, F), kThreads, 0, stream_of(ctx)>>>(dout, gate_up,
                                                                                dgate_up, M, F);
  check_launch("swiglu_backward_kernel");
}

void add(const Context& ctx, const float* a, const float* b, float* out, int64_t n) {
  require(n >= 0, "add: n must not be negative");
  if (n == 0) return;
  add_kernel<<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(a, b, out, n);
  check_launch("add_kernel");
}

void scale(const Context& ctx, float* x, float factor, int64_t n) {
  require(n >= 0, "scale: n must not be negative");
  if (n == 0) return;
  scale_kernel<<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(x, factor, n);
  check_launch("scale_kernel");
}

void add_bias(const Context& ctx, float* y, const float* b, int64_t M, int64_t C) {
  require(M >= 0 && C >= 0, "add_bias: sizes must not be negative");
  if (M == 0 || C == 0) return;
  add_bias_kernel<<<kGrid.row_grid(M, C), kThreads, 0, stream_of(ctx)>>>(y, b, M, C);
  check_launch("add_bias_kernel");
}

static AdamWStep adamw_step(const AdamWParams& p) {
  AdamWStep s;
  s.lr = float(p.lr), s.b1 = float(p.beta1), s.b2 = float(p.beta2), s.eps = float(p.eps);
  s.one_minus_b1 = 1.0f - s.b1, s.one_minus_b2 = 1.0f - s.b2;
  s.decay = float(1.0 - p.lr * p.weight_decay);
  s.bias1 = float(1.0 / (1.0 - std::pow(p.beta1, double(p.step))));
  s.bias2_sqrt = float(1.0 / std::sqrt(1.0 - std::pow(p.beta2, double(p.step))));
  return s;
}

void adamw_update(const Context& ctx, float* param, const float* grad, float* m, float* v,
                  int64_t n, const AdamWParams& p) {
  require(n >= 0, "adamw_update: n must not be negative");
  if (n == 0) return;
  adamw_kernel<<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(param, grad, m, v, n, adamw_step(p));
  check_launch("adamw_kernel");
}

void adamw_update_low(const Context& ctx, float* master, const float* grad,
                      const uint16_t* grad_bf16, float grad_scale, float* m, float* v, int64_t n,
                      const AdamWParams& hyper, uint16_t* params_low, LowPrecision p) {
  require(n >= 0, "adamw_update_low: n must not be negative");
  require((grad == nullptr) != (grad_bf16 == nullptr),
          "adamw_update_low takes the gradients in f32 or in bf16, one of the two");
  if (n == 0) return;
  const AdamWStep s = adamw_step(hyper);
  if (p == LowPrecision::kBf16) {
    adamw_low_kernel<LowPrecision::kBf16><<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(
        master, grad, grad_bf16, grad_scale, m, v, n, s, params_low);
  } else {
    adamw_low_kernel<LowPrecision::kF16><<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(
        master, grad, grad_bf16, grad_scale, m, v, n, s, params_low);
  }
  check_launch("adamw_low_kernel");
}

void cast_to_low(const Context& ctx, const float* x, uint16_t* y, int64_t n, LowPrecision p) {
  require(n >= 0, "cast_to_low: n must not be negative");
  if (n == 0) return;
  if (p == LowPrecision::kBf16) {
    cast_to_low_kernel<LowPrecision::kBf16>
        <<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(x, y, n);
  } else {
    cast_to_low_kernel<LowPrecision::kF16><<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(x, y, n);
  }
  check_launch("cast_to_low_kernel");
}

void cast_from_low(const Context& ctx, const uint16_t* x, float* y, int64_t n, LowPrecision p) {
  require(n >= 0, "cast_from_low: n must not be negative");
  if (n == 0) return;
  if (p == LowPrecision::kBf16) {
    cast_from_low_kernel<LowPrecision::kBf16>
        <<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(x, y, n);
  } else {
    cast_from_low_kernel<LowPrecision::kF16>
        <<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(x, y, n);
  }
  check_launch("cast_from_low_kernel");
}

bool all_finite(const Context& ctx, const float* x, int64_t n) {
  require(n >= 0, "all_finite: n must not be negative");
  if (n == 0) return true;
  int* found = static_cast<int*>(ctx.cuda->scratch);
  check_cuda(cudaMemsetAsync(found, 0, sizeof(int), stream_of(ctx)),
             "cudaMemsetAsync (all_finite)");
  find_non_finite_kernel<<<kGrid.flat(n), kThreads, 0, stream_of(ctx)>>>(x, n, found);
  check_launch("find_non_finite_kernel");
  return read_back(ctx, found) == 0;
}

double sum_squares(const Context& ctx, const float* x, int64_t n) {
  require(n >= 0, "sum_squares: n must not be negative");
  if (n == 0) return 0.0;
  double* total = static_cast<double*>(ctx.cuda->scratch);
  double* partials = total + 1;
  const unsigned blocks = kGrid.flat(n);
  sum_squares_partials_kernel<<<blocks, kThreads, 0, stream_of(ctx)>>>(x, n, partials);
  check_launch("sum_squares_partials_kernel");
  sum_partials_kernel<<<1, kThreads, 0, stream_of(ctx)>>>(partials, blocks, total);
  check_launch("sum_partials_kernel");
  return read_back(ctx, total);
}

}  // namespace

void add_elementwise_kernels(Backend& backend) {
  backend.ops.gelu_forward = gelu_forward;
  backend.ops.gelu_backward = gelu_backward;
  backend.ops.swiglu_forward = swiglu_forward;
  backend.ops.swiglu_backward = swiglu_backward;
  backend.ops.add = add;
  backend.ops.scale = scale;
  backend.ops.add_bias = add_bias;
  backend.ops.adamw_update = adamw_update;
  backend.adamw_update_low = adamw_update_low;
  backend.cast_to_low = cast_to_low;
  backend.cast_from_low = cast_from_low;
  backend.all_finite = all_finite;
  backend.ops.sum_squares = sum_squares;
}

void accumulate_column_sums(const Context& ctx, const float* x, int64_t M, int64_t N, float* sums) {
  require(M >= 0 && N >= 0, "accumulate_column_sums: sizes must not be negative");
  if (M == 0 || N == 0) return;
  const int64_t scratch_floats = int64_t(ctx.cuda->scratch_bytes / sizeof(float));
  require(N <= scratch_floats, "accumulate_column_sums: too many columns for the scratch buffer");
  const launch::ColumnSumGrid split =
      launch::column_sum_grid(M, N, scratch_floats / N, kGrid.max_blocks());
  float* partials = static_cast<float*>(ctx.cuda->scratch);
  column_sum_partials_kernel<<<split.grid, dim3(kColumnTile, kTileRows), 0, stream_of(ctx)>>>(
      x, M, N, split.rows_per_block, partials);
  check_launch("column_sum_partials_kernel");
  add_column_partials_kernel<<<kGrid.flat(N), kThreads, 0, stream_of(ctx)>>>(
      partials, split.row_blocks, N, sums);
  check_launch("add_column_partials_kernel");
}

}  // namespace tessera::kernels::cuda
