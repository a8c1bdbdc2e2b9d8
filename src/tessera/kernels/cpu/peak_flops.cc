#include "tessera/kernels/peak_flops.h"

#include <fmt/format.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <vector>

#include "tessera/core/cpu_model.h"

namespace tessera::kernels {
namespace {

using Clock = std::chrono::steady_clock;

// Enough independent accumulators to cover an FMA's latency on two pipes.
constexpr int kChains = 12;
constexpr int64_t kRounds = 1 << 22;  // some milliseconds, far above a thread's wake-up
constexpr int kRepeats = 3;

// Read at run time, so that the compiler can neither fold the chains nor drop them.
volatile float g_seed = 1e-3f;
volatile float g_sink = 0;

// Seconds of CPU this thread has run.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Runs `round(n)` (n rounds of kChains multiply-adds each worth `flops_per_op`) on every thread at
// once, the best of a few tries: FLOP/s. Each thread's rate is taken over its own CPU time, and the
// rates are summed: another process that shares a core slows the wall clock of that thread's
// share, not the multiply-adds it ran, so a busy moment of the machine never lowers its peak (and
// never raises the MFU divided by it).
template <typename Round>
double best_rate(double flops_per_op, Round&& round) {
  double best = 0;
  for (int attempt = 0; attempt < kRepeats; ++attempt) {
    float sink = 0;
    double rate = 0;
#pragma omp parallel reduction(+ : sink, rate)
    {
      const double start = thread_cpu_seconds();
      sink += round(kRounds);
      rate += double(kRounds) * kChains * flops_per_op / (thread_cpu_seconds() - start);
    }
    g_sink = sink;
    best = std::max(best, rate);
  }
  return best;
}

#if defined(__AVX512F__)
constexpr const char* kFmaName = "AVX-512 FMA";
using Vec = __m512;
inline Vec splat(float x) { return _mm512_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr const char* kFmaName = "AVX2 FMA";
using Vec = __m256;
inline Vec splat(float x) { return _mm256_set1_ps(x); }
inline Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
#else
constexpr const char* kFmaName = "scalar multiply-add";
using Vec = float;
inline Vec splat(float x) { return x; }
inline Vec fma(Vec a, Vec b, Vec c) { return a * b + c; }
#endif
constexpr int kLanes = sizeof(Vec) / sizeof(float);

// The sum of a vector's lanes (copied out: GCC 12's _mm512_reduce_add_ps warns of an
// uninitialised temporary).
template <typename V>
float total(const V& v) {
  float lanes[sizeof(V) / sizeof(float)];
  std::memcpy(lanes, &v, sizeof lanes);
  float sum = 0;
  for (float x : lanes) sum += x;
  return sum;
}

float fma_round(int64_t rounds) {
  Vec acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = splat(float(i) * g_seed);
  const Vec a = splat(0.999f), b = splat(1e-4f);
  for (int64_t r = 0; r < rounds; ++r) {
    for (int i = 0; i < kChains; ++i) acc[i] = fma(acc[i], a, b);
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) sum += total(acc[i]);
  return sum;
}

PeakFlops fma_peak(const std::string& what) {
  return {best_rate(2.0 * kLanes, fma_round),
          fmt::format("{} ({}), {} threads", kFmaName, what, omp_get_max_threads())};
}

#if defined(__AVX512BF16__)
float bf16_dot_round(int64_t rounds) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i) * g_seed);
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(g_seed), _mm512_set1_ps(g_seed));
  for (int64_t r = 0; r < rounds; ++r) {
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, a);
  }
  float sum = 0;
  for (int i = 0; i < kChains; ++i) sum += total(acc[i]);
  return sum;
}
#endif

// AMX is reached through oneDNN (which asks the kernel for the tiles): a matmul small enough to
// stay in cache, so that it measures the tiles rather than memory.
PeakFlops matmul_peak(LowPrecision p) {
  constexpr int64_t n = 1024;
  std::vector<uint16_t> a(n * n), b(n * n);
  std::vector<float> ones(n * n, 1.0f), c(n * n);
  cast_to_low(kCpuContext, ones.data(), a.data(), n * n, p);
  cast_to_low(kCpuContext, ones.data(), b.data(), n * n, p);
  double best = 0;
  gemm_low(kCpuContext, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n,
           p);
  for (int attempt = 0; attempt < 2 * kRepeats; ++attempt) {
    const auto start = Clock::now();
    gemm_low(kCpuContext, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n,
             p);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    best = std::max(best, 2.0 * double(n * n * n) / seconds);
  }
  return {best, fmt::format("AMX tiles ({} matmul {}^3 through {}), {} threads",
                            p == LowPrecision::kBf16 ? "bf16" : "f16", n,
                            low_precision_gemm_path(p), omp_get_max_threads())};
}

}  // namespace

PeakFlops measure_peak_flops(std::optional<LowPrecision> low) {
  if (!low) return fma_peak("f32");
  if (*low == LowPrecision::kF16 || !low_precision_gemm_uses_onednn(*low)) {
    return fma_peak(fmt::format("{} widened to f32", *low == LowPrecision::kF16 ? "f16" : "bf16"));
  }
  if (cpu_has_amx_bf16()) return matmul_peak(*low);
#if defined(__AVX512BF16__)
  // 32 products and 32 additions a lane pair: 64 FLOPs an instruction.
  return {best_rate(64.0, bf16_dot_round),
          fmt::format("AVX512_BF16 VDPBF16PS (bf16), {} threads", omp_get_max_threads())};
#else
  return matmul_peak(*low);
#endif
}

}  // namespace tessera::kernels
