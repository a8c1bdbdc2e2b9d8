// The peak FLOP rate of this machine's matmul engine for a precision, measured in a few tens of
// milliseconds on every OpenMP thread: the denominator of a CPU run's MFU. Register-resident
// multiply-adds that never wait for memory: AVX-512 (or AVX2) FMAs for f32 and for low precision
// that gemm_low widens to f32, VDPBF16PS where it multiplies bf16 with AVX512_BF16, and AMX tile
// products, through oneDNN's matmul on a cache-resident shape, where it has AMX.
#pragma once

#include <optional>
#include <string>

#include "tessera/kernels/low_precision.h"

namespace tessera::kernels {

struct PeakFlops {
  double flops_per_second = 0;
  std::string how;  // "AVX-512 FMA (f32), 2 threads"
};

// The peak for matmuls in f32 (no `low`) or in the low precision `low`.
PeakFlops measure_peak_flops(std::optional<LowPrecision> low);

}  // namespace tessera::kernels
