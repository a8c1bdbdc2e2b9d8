// The CUDA backend's mixed-precision kernels against the CPU's: the casts (bit for bit, over every
// exponent, tie and special value), the bf16/f16 matmul and linear layers, and the finiteness
// check of dynamic loss scaling.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "tessera/kernels/low_precision.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using cuda_testing::agrees;
using cuda_testing::CudaTest;
using cuda_testing::kF32Tensor;
using cuda_testing::kLowTensor;
using cuda_testing::on_both;
using cuda_testing::Twin;
using testing::random_vector;

constexpr LowPrecision kBoth[] = {LowPrecision::kBf16, LowPrecision::kF16};

std::string name_of(LowPrecision p) { return p == LowPrecision::kBf16 ? "bf16" : "f16"; }

std::string hex(uint32_t bits, int digits) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%0*x", digits, bits);
  return text;
}

std::vector<uint16_t> to_low(const std::vector<float>& x, LowPrecision p) {
  std::vector<uint16_t> y(x.size());
  cast_to_low(kCpuContext, x.data(), y.data(), int64_t(x.size()), p);
  return y;
}

// Every f32 sign and exponent with the fraction bits around p's rounding position set to each
// pattern that decides a rounding: exact, just above, just below, the tie and just above it,
// and all ones. That covers the ties to even, the overflow to inf, the subnormals of both formats
// (whose rounding position lies higher, among the enumerated bits) and NaNs with and without
// their payload in the dropped bits. Random values of many sizes follow.
std::vector<float> cast_inputs(LowPrecision p) {
  const int dropped = p == LowPrecision::kBf16 ? 16 : 13;
  const uint32_t half = 1u << (dropped - 1), all = (1u << dropped) - 1;
  const uint32_t lows[] = {0, 1, half - 1, half, half + 1, all};
  std::vector<float> x;
  for (uint64_t high = 0; high < (uint64_t{1} << (32 - dropped)); ++high) {
    for (uint32_t low : lows) x.push_back(std::bit_cast<float>(uint32_t(high << dropped) | low));
  }
  for (int e = -45; e <= 40; e += 5) {
    for (float v : random_vector<float>(101, 300 + e, std::pow(10.0, e))) x.push_back(v);
  }
  x.push_back(std::numeric_limits<float>::denorm_min());
  x.push_back(-std::numeric_limits<float>::max());
  return x;
}

// Bit-for-bit, naming the first differing input by its f32 bits.
::testing::AssertionResult same_casts(const std::vector<float>& x, const std::vector<uint16_t>& cpu,
                                      const std::vector<uint16_t>& cuda) {
  size_t differ = 0, first = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (cpu[i] != cuda[i] && differ++ == 0) first = i;
  }
  if (differ == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << differ << " of " << cpu.size() << " casts differ; the first, index " << first
         << ", f32 " << hex(std::bit_cast<uint32_t>(x[first]), 8) << " (" << x[first] << "): cpu "
         << hex(cpu[first], 4) << ", cuda " << hex(cuda[first], 4);
}

class CudaCast : public CudaTest {};

TEST_F(CudaCast, ToLowIsBitIdenticalToCpu) {
  for (LowPrecision p : kBoth) {
    SCOPED_TRACE(name_of(p));
    const std::vector<float> x = cast_inputs(p);
    const int64_t n = int64_t(x.size());
    Twin<float> in(gpu(), x);
    Twin<uint16_t> out(gpu(), std::vector<uint16_t>(n, 0xabcd));
    on_both(gpu(), [&](const Context& ctx) { cast_to_low(ctx, in.on(ctx), out.on(ctx), n, p); });
    EXPECT_TRUE(same_casts(x, out.cpu(), out.cuda()));

    // A slice starting one element in, of odd length, as a shard of a flat buffer is cast: the
    // elements around it stay as they were.
    Twin<uint16_t> slice(gpu(), std::vector<uint16_t>(n, 0xabcd));
    on_both(gpu(), [&](const Context& ctx) {
      cast_to_low(ctx, in.on(ctx) + 1, slice.on(ctx) + 1, (n - 2) | 1, p);
    });
    EXPECT_TRUE(same_casts(x, slice.cpu(), slice.cuda())) << "slice";
  }
}

TEST_F(CudaCast, FromLowIsExactForEveryPattern) {
  for (LowPrecision p : kBoth) {
    SCOPED_TRACE(name_of(p));
    std::vector<uint16_t> patterns(1 << 16);
    for (size_t i = 0; i < patterns.size(); ++i) patterns[i] = uint16_t(i);
    const int64_t n = int64_t(patterns.size());
    Twin<uint16_t> in(gpu(), patterns);
    Twin<float> out(gpu(), std::vector<float>(n, -1.0f));
    on_both(gpu(), [&](const Context& ctx) { cast_from_low(ctx, in.on(ctx), out.on(ctx), n, p); });
    const std::vector<float> cpu = out.cpu(), cuda = out.cuda();
    int failures = 0;
    for (int64_t i = 0; i < n && failures < 10; ++i) {
      // Values are exact, so their bits agree; a NaN only has to stay a NaN of the same sign.
      const bool ok = std::isnan(cpu[i])
                          ? std::isnan(cuda[i]) && std::signbit(cuda[i]) == std::signbit(cpu[i])
                          : std::bit_cast<uint32_t>(cpu[i]) == std::bit_cast<uint32_t>(cuda[i]);
      if (!ok) {
        ++failures;
        ADD_FAILURE() << name_of(p) << " " << hex(uint32_t(i), 4) << ": cpu "
                      << hex(std::bit_cast<uint32_t>(cpu[i]), 8) << ", cuda "
                      << hex(std::bit_cast<uint32_t>(cuda[i]), 8);
      }
    }

    Twin<float> slice(gpu(), std::vector<float>(n, -1.0f));
    on_both(gpu(), [&](const Context& ctx) {
      cast_from_low(ctx, in.on(ctx) + 1, slice.on(ctx) + 1, n - 3, p);
    });
    EXPECT_TRUE(agrees(slice, cuda_testing::kExact)) << "slice";
  }
}

class CudaLowGemm : public CudaTest {};

TEST_F(CudaLowGemm, MatchesCpuForEveryTransposeAndBetaWithPaddedLeadingDimensions) {
  struct Shape {
    int64_t M, N, K;
  };
  uint64_t seed = 400;
  for (LowPrecision p : kBoth) {
    for (Shape s : {Shape{13, 17, 19}, Shape{256, 384, 128}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          for (float beta : {0.0f, 1.0f}) {
            SCOPED_TRACE(::testing::Message()
                         << name_of(p) << " M=" << s.M << " N=" << s.N << " K=" << s.K
                         << " trans_a=" << ta << " trans_b=" << tb << " beta=" << beta);
            const int64_t lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 7;
            const int64_t a_rows = ta ? s.K : s.M, b_rows = tb ? s.N : s.K;
            Twin<uint16_t> a(gpu(), to_low(random_vector<float>(a_rows * lda, ++seed), p));
            Twin<uint16_t> b(gpu(), to_low(random_vector<float>(b_rows * ldb, ++seed), p));
            // With beta 0, C is not read: NaN there must not reach the result.
            Twin<float> c(
                gpu(), beta == 0.0f
                           ? std::vector<float>(s.M * ldc, std::numeric_limits<float>::quiet_NaN())
                           : random_vector<float>(s.M * ldc, ++seed));
            on_both(gpu(), [&](const Context& ctx) {
              gemm_low(ctx, ta, tb, s.M, s.N, s.K, 0.75f, a.on(ctx), lda, b.on(ctx), ldb, beta,
                       c.on(ctx), ldc, p);
            });
            EXPECT_TRUE(agrees(c, kLowTensor));
          }
        }
      }
    }
  }
}

class CudaLowLinear : public CudaTest {};

TEST_F(CudaLowLinear, ForwardMatchesCpuWithAndWithoutBias) {
  struct Shape {
    int64_t M, in, out;
  };
  for (LowPrecision p : kBoth) {
    // Fewer than 32 rows take the CPU's decoding path, more gemm_low.
    for (Shape s : {Shape{1, 67, 45}, Shape{7, 67, 45}, Shape{45, 67, 45}, Shape{128, 256, 320}}) {
      for (bool bias : {false, true}) {
        SCOPED_TRACE(::testing::Message() << name_of(p) << " M=" << s.M << " in=" << s.in
                                          << " out=" << s.out << " bias=" << bias);
        Twin<uint16_t> x(gpu(), to_low(random_vector<float>(s.M * s.in, 411), p));
        Twin<uint16_t> w(gpu(), to_low(random_vector<float>(s.out * s.in, 412, 0.2), p));
        Twin<float> b(gpu(), random_vector<float>(s.out, 413));
        Twin<float> y(gpu(), random_vector<float>(s.M * s.out, 414));  // written
        on_both(gpu(), [&](const Context& ctx) {
          linear_forward_low(ctx, x.on(ctx), w.on(ctx), bias ? b.on(ctx) : nullptr, y.on(ctx), s.M,
                             s.in, s.out, p);
        });
        EXPECT_TRUE(agrees(y, kLowTensor));
      }
    }
  }
}

TEST_F(CudaLowLinear, BackwardMatchesCpuForEveryChoiceOfGradients) {
  const int64_t in = 67, out = 45;
  for (LowPrecision p : kBoth) {
    for (int64_t M : {5, 45}) {
      for (int wanted = 1; wanted < 8; ++wanted) {
        const bool want_dx = wanted & 1, want_dw = wanted & 2, want_db = wanted & 4;
        SCOPED_TRACE(::testing::Message() << name_of(p) << " M=" << M << " dx=" << want_dx
                                          << " dw=" << want_dw << " db=" << want_db);
        const std::vector<float> dy_f32 = random_vector<float>(M * out, 421);
        Twin<float> dy(gpu(), dy_f32);
        Twin<uint16_t> dy_low(gpu(), to_low(dy_f32, p));
        Twin<uint16_t> x(gpu(), to_low(random_vector<float>(M * in, 422), p));
        Twin<uint16_t> w(gpu(), to_low(random_vector<float>(out * in, 423, 0.2), p));
        Twin<float> dx(gpu(), random_vector<float>(M * in, 424));    // written
        Twin<float> dw(gpu(), random_vector<float>(out * in, 425));  // accumulated
        Twin<float> db(gpu(), random_vector<float>(out, 426));       // accumulated
        on_both(gpu(), [&](const Context& ctx) {
          linear_backward_low(ctx, want_db ? dy.on(ctx) : nullptr, dy_low.on(ctx),
                              want_dw ? x.on(ctx) : nullptr, want_dx ? w.on(ctx) : nullptr,
                              want_dx ? dx.on(ctx) : nullptr, want_dw ? dw.on(ctx) : nullptr,
                              want_db ? db.on(ctx) : nullptr, M, in, out, p);
        });
        EXPECT_TRUE(agrees(dx, kLowTensor)) << "dx";
        EXPECT_TRUE(agrees(dw, kLowTensor)) << "dw";
        // The bias gradient sums the f32 dy: f32 arithmetic throughout.
        EXPECT_TRUE(agrees(db, kF32Tensor)) << "db";
      }
    }
  }
}

class CudaAllFinite : public CudaTest {};

TEST_F(CudaAllFinite, FindsEveryPlantedInfAndNan) {
  const int64_t n = (int64_t{1} << 20) + 5;
  const float inf = std::numeric_limits<float>::infinity();
  struct Plant {
    int64_t at;
    float value;
    bool finite;
  };
  const Plant plants[] = {
      {-1, 0.0f, true},  // nothing planted
      {7, std::numeric_limits<float>::max(), true},
      {7, std::numeric_limits<float>::denorm_min(), true},
      {12345, inf, false},
      {n - 1, -inf, false},  // the array's tail
      {0, std::numeric_limits<float>::quiet_NaN(), false},
      {n / 2, std::bit_cast<float>(0x7f800001u), false},  // a signalling NaN
      {n - 3, std::bit_cast<float>(0xffc00000u), false},  // a negative NaN
  };
  for (const Plant& plant : plants) {
    SCOPED_TRACE(::testing::Message() << "value " << plant.value << " at " << plant.at);
    std::vector<float> values = random_vector<float>(n, 431, 100.0);
    if (plant.at >= 0) values[plant.at] = plant.value;
    Twin<float> x(gpu(), values);
    EXPECT_EQ(all_finite(kCpuContext, x.on(kCpuContext), n), plant.finite);
    EXPECT_EQ(all_finite(gpu(), x.on(gpu()), n), plant.finite);
  }
  // Short arrays, and none at all.
  Twin<float> few(gpu(), std::vector<float>{1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()});
  EXPECT_FALSE(all_finite(gpu(), few.on(gpu()), 3));
  EXPECT_TRUE(all_finite(gpu(), few.on(gpu()), 2));
  EXPECT_TRUE(all_finite(gpu(), few.on(gpu()), 0));
}

}  // namespace
}  // namespace tessera::kernels
