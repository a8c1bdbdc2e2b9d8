// Rotary position embeddings on a CUDA device, in the Hugging Face "rotate_half" layout of
// ops.h, rotating the q and k heads of qkv in place. One block per row (a grid-stride loop over
// rows): the block computes the row's cos and sin once into shared memory, then its threads turn
// every q and k pair with them. Frequencies and angles are computed in double, as the CPU does,
// since pos * freq in float loses too many bits at long positions; CUDA's double pow, sin and cos
// are within 2 ulp rather than glibc's, so after rounding to float a cos or sin can rarely differ
// from the CPU's by one float ulp. Backward is the same turn with sin negated.
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/cuda/cuda_backend.h"
#include "tessera/kernels/cuda/launch.cuh"

namespace tessera::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr launch::GridCap kGrid{kThreads, 4096};
constexpr int kMaxPairs = int(kRopeMaxHeadDim / 2);

// Pair i of head h within a row is channels h * hd + i and h * hd + half + i; indices within a
// row are int, which the launcher checks.
__global__ void rope_kernel(float* qkv, int64_t rows, int64_t T, int rotated_heads, int64_t ld,
                            int hd, int64_t pos0, Rope rope, double sin_sign) {
  __shared__ double inv_freq[kMaxPairs];
  __shared__ float cos_a[kMaxPairs], sin_a[kMaxPairs];
  const int half = hd / 2;
  const double scale = rope_attention_factor(rope);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    inv_freq[i] = rope_inverse_frequency(rope, i, hd);
  }
  const int pairs = rotated_heads * half;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    __syncthreads();  // inv_freq is ready, and the previous row is done with cos_a and sin_a
    const double pos = double(pos0 + r % T);
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
      double s, c;
      sincos(pos * inv_freq[i], &s, &c);
      cos_a[i] = float(scale * c);
      sin_a[i] = float(scale * sin_sign * s);
    }
    __syncthreads();
    float* row = qkv + r * ld;
    for (int j = threadIdx.x; j < pairs; j += blockDim.x) {
      const int h = j / half, i = j % half;
      float* x1 = row + h * hd + i;
      float* x2 = x1 + half;
      const float a = *x1, b = *x2;
      *x1 = a * cos_a[i] - b * sin_a[i];
      *x2 = b * cos_a[i] + a * sin_a[i];
    }
  }
}

void rotate_qk(const Context& ctx, float* qkv, int64_t B, int64_t T, int64_t H, int64_t KVH,
               int64_t hd, int64_t pos0, const Rope& rope, double sin_sign) {
  require(hd > 0 && hd % 2 == 0 && hd <= kRopeMaxHeadDim,
          "rope: the head dimension must be even and at most kRopeMaxHeadDim");
  require(rope.theta > 0, "rope: theta must be positive");
  require(B >= 0 && T >= 0 && H >= 0 && KVH >= 0, "rope: sizes must not be negative");
  const int64_t ld = (H + 2 * KVH) * hd;
  require(ld <= std::numeric_limits<int>::max(), "rope: a qkv row must have under 2^31 channels");
  if (B * T == 0 || H + KVH == 0) return;
  rope_kernel<<<kGrid.per_row(B * T), kThreads, 0, stream_of(ctx)>>>(
      qkv, B * T, T, int(H + KVH), ld, int(hd), pos0, rope, sin_sign);
  check_launch("rope_kernel");
}

void rope_forward(const Context& ctx, float* qkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                  int64_t hd, int64_t pos0, const Rope& rope) {
  rotate_qk(ctx, qkv, B, T_, H, KVH, hd, pos0, rope, 1.0);
}

void rope_backward(const Context& ctx, float* dqkv, int64_t B, int64_t T_, int64_t H, int64_t KVH,
                   int64_t hd, int64_t pos0, const Rope& rope) {
  rotate_qk(ctx, dqkv, B, T_, H, KVH, hd, pos0, rope, -1.0);
}

}  // namespace

void add_rope_kernels(Backend& backend) {
  backend.ops.rope_forward = rope_forward;
  backend.ops.rope_backward = rope_backward;
}

}  // namespace tessera::kernels::cuda
