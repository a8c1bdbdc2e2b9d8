// The bias gradient of a linear layer on a CUDA device, shared by the f32 and low-precision
// matmul launchers.
#pragma once

#include <cstdint>

#include "tessera/kernels/context.h"

namespace tessera::kernels::cuda {

// sums[j] += sum over the M rows of x[m, j], x row-major [M, N].
void accumulate_column_sums(const Context& ctx, const float* x, int64_t M, int64_t N, float* sums);

}  // namespace tessera::kernels::cuda
