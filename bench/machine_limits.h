// The machine's own limits, measured in the benchmark's run and with its threads, so that the
// benchmark's figures can be given as a share of them: the matmul rates of the engine's own
// kernels (f32 sgemm and bf16 gemm_low) at one large shape, and memory bandwidth, copying
// (STREAM convention: bytes read plus bytes written per second) and reading alone. Each is the
// best of several runs, since other processes share the machine.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/huge_pages.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"

namespace tessera::bench {

struct MachineLimits {
  double f32_matmul = 0, bf16_matmul = 0;         // FLOP/s of a 4096 x 768 x 3072 product
  std::string bf16_path;                          // how gemm_low multiplies bf16 here
  double copy_bandwidth = 0, read_bandwidth = 0;  // bytes/s over buffers far larger than caches

  nlohmann::json json() const {
    return {{"f32_matmul_flops", f32_matmul},
            {"bf16_matmul_flops", bf16_matmul},
            {"bf16_path", bf16_path},
            {"copy_bandwidth", copy_bandwidth},
            {"read_bandwidth", read_bandwidth}};
  }
};

namespace detail {

template <typename F>
double best_seconds(int runs, F&& f) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Each thread its own contiguous part of [0, n).
template <typename F>
void split_over_threads(int64_t n, F&& f) {
#pragma omp parallel
  {
    const int64_t part = n / omp_get_num_threads(), begin = part * omp_get_thread_num();
    f(begin, omp_get_thread_num() + 1 == omp_get_num_threads() ? n - begin : part);
  }
}

}  // namespace detail

// Measures the matmul rates into m.
inline void measure_matmul_rates(MachineLimits& m) {
  namespace k = kernels;
  constexpr int64_t M = 4096, K = 768, N = 3072;
  const double flops = 2.0 * M * N * K;
  LargeVector<float> a(M * K, 0.25f), b(K * N, 0.5f), c(M * N);
  m.f32_matmul = flops / detail::best_seconds(8, [&] {
                   k::gemm<float>(k::kCpuContext, false, false, M, N, K, 1.0f, a.data(), K,
                                  b.data(), N, 0.0f, c.data(), N);
                 });
  LargeVector<uint16_t> a_low(a.size()), b_low(b.size());
  k::cast_to_low(k::kCpuContext, a.data(), a_low.data(), M * K, k::LowPrecision::kBf16);
  k::cast_to_low(k::kCpuContext, b.data(), b_low.data(), K * N, k::LowPrecision::kBf16);
  m.bf16_matmul = flops / detail::best_seconds(8, [&] {
                    k::gemm_low(k::kCpuContext, false, false, M, N, K, 1.0f, a_low.data(), K,
                                b_low.data(), N, 0.0f, c.data(), N, k::LowPrecision::kBf16);
                  });
  m.bf16_path = k::low_precision_gemm_path(k::LowPrecision::kBf16);
}

// Measures the bandwidths over buffers of `mib` MiB into m, keeping what m holds if it was more.
inline void measure_bandwidth(MachineLimits& m, int64_t mib = 512) {
  const int64_t bytes = mib << 20;
  LargeVector<char> from(bytes, 1), to(bytes, 2);
  const double copy = 2.0 * double(bytes) / detail::best_seconds(5, [&] {
                        detail::split_over_threads(bytes, [&](int64_t begin, int64_t n) {
                          std::memcpy(to.data() + begin, from.data() + begin, size_t(n));
                        });
                      });
  // Sixty-four independent sums per thread, so that the loads, not the additions, set the pace.
  const int64_t floats = bytes / int64_t(sizeof(float)) / 64 * 64;
  const auto* values = reinterpret_cast<const float*>(from.data());
  float sink = 0;
  const double read = double(floats) * sizeof(float) / detail::best_seconds(5, [&] {
                        detail::split_over_threads(floats / 64, [&](int64_t begin, int64_t n) {
                          float sums[64] = {};
                          for (int64_t i = 64 * begin; i < 64 * (begin + n); i += 64) {
#pragma omp simd
                            for (int j = 0; j < 64; ++j) sums[j] += values[i + j];
                          }
                          float total = 0;
                          for (float v : sums) total += v;
#pragma omp atomic
                          sink += total;
                        });
                      });
  if (sink < 0) std::printf(" ");  // keeps the reads
  m.copy_bandwidth = std::max(m.copy_bandwidth, copy);
  m.read_bandwidth = std::max(m.read_bandwidth, read);
}

inline MachineLimits measure_machine_limits() {
  MachineLimits m;
  measure_matmul_rates(m);
  measure_bandwidth(m);
  return m;
}

}  // namespace tessera::bench
