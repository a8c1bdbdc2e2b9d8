#include "tessera/kernels/low_precision.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/kernels/ops.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;

constexpr LowPrecision kBoth[] = {LowPrecision::kBf16, LowPrecision::kF16};

std::string name_of(LowPrecision p) { return p == LowPrecision::kBf16 ? "bf16" : "f16"; }

uint16_t to_low(float x, LowPrecision p) {
  uint16_t y;
  cast_to_low(kCpuContext, &x, &y, 1, p);
  return y;
}

float from_low(uint16_t x, LowPrecision p) {
  float y;
  cast_from_low(kCpuContext, &x, &y, 1, p);
  return y;
}

std::vector<uint16_t> to_low(const std::vector<float>& x, LowPrecision p) {
  std::vector<uint16_t> y(x.size());
  cast_to_low(kCpuContext, x.data(), y.data(), int64_t(x.size()), p);
  return y;
}

std::vector<float> from_low(const std::vector<uint16_t>& x, LowPrecision p) {
  std::vector<float> y(x.size());
  cast_from_low(kCpuContext, x.data(), y.data(), int64_t(x.size()), p);
  return y;
}

// Pins the gemm path for one scope, so a failing assertion cannot leak the setting.
class PathScope {
 public:
  explicit PathScope(LowPrecisionGemmPath path) { set_low_precision_gemm_path(path); }
  ~PathScope() { set_low_precision_gemm_path(LowPrecisionGemmPath::kAuto); }
};

TEST(CastToLow, Bf16RoundsToNearestEven) {
  const auto p = LowPrecision::kBf16;
  EXPECT_EQ(to_low(1.0f, p), 0x3f80);
  EXPECT_EQ(to_low(-2.0f, p), 0xc000);
  EXPECT_EQ(to_low(0.0f, p), 0x0000);
  EXPECT_EQ(to_low(-0.0f, p), 0x8000);
  // bf16 keeps 7 fraction bits: 1 + 2^-8 is a tie between 1 and 1 + 2^-7.
  EXPECT_EQ(to_low(1.0f + 0x1p-8f, p), 0x3f80);                     // tie, down to even
  EXPECT_EQ(to_low(1.0f + 3 * 0x1p-8f, p), 0x3f82);                 // tie, up to even
  EXPECT_EQ(to_low(1.0f + 0x1p-8f + 0x1p-20f, p), 0x3f81);          // just above the tie
  EXPECT_EQ(to_low(std::numeric_limits<float>::max(), p), 0x7f80);  // rounds up to inf
  EXPECT_EQ(to_low(std::numeric_limits<float>::infinity(), p), 0x7f80);
  EXPECT_EQ(to_low(-std::numeric_limits<float>::infinity(), p), 0xff80);
  EXPECT_TRUE(std::isnan(from_low(to_low(std::numeric_limits<float>::quiet_NaN(), p), p)));
  // A NaN whose payload sits only in the low half must not round into inf.
  EXPECT_TRUE(std::isnan(from_low(to_low(std::bit_cast<float>(0x7f800001u), p), p)));
  // f32 subnormals keep their leading bits instead of being flushed to zero.
  EXPECT_EQ(to_low(0x1p-130f, p), 0x0008);  // 8 units of 2^-133
  EXPECT_EQ(to_low(-0x1p-133f, p), 0x8000 | 0x0001);
}

TEST(CastToLow, F16RoundsToNearestEvenAndOverflowsToInf) {
  const auto p = LowPrecision::kF16;
  EXPECT_EQ(to_low(1.0f, p), 0x3c00);
  EXPECT_EQ(to_low(-2.0f, p), 0xc000);
  EXPECT_EQ(to_low(-0.0f, p), 0x8000);
  // f16 keeps 10 fraction bits: 1 + 2^-11 is a tie.
  EXPECT_EQ(to_low(1.0f + 0x1p-11f, p), 0x3c00);
  EXPECT_EQ(to_low(1.0f + 3 * 0x1p-11f, p), 0x3c02);
  EXPECT_EQ(to_low(65504.0f, p), 0x7bff);  // the largest finite f16
  EXPECT_EQ(to_low(65519.0f, p), 0x7bff);
  EXPECT_EQ(to_low(65520.0f, p), 0x7c00);  // the tie with 65536 goes to even: inf
  EXPECT_EQ(to_low(1e10f, p), 0x7c00);
  EXPECT_EQ(to_low(-1e10f, p), 0xfc00);
  EXPECT_EQ(to_low(std::numeric_limits<float>::infinity(), p), 0x7c00);
  EXPECT_TRUE(std::isnan(from_low(to_low(std::numeric_limits<float>::quiet_NaN(), p), p)));
  EXPECT_TRUE(std::isnan(from_low(to_low(std::bit_cast<float>(0xff800001u), p), p)));
  // Subnormal f16 values are counted in units of 2^-24.
  EXPECT_EQ(to_low(0x1p-14f, p), 0x0400);  // the smallest normal
  EXPECT_EQ(to_low(0x1p-24f, p), 0x0001);
  EXPECT_EQ(to_low(3 * 0x1p-24f, p), 0x0003);
  EXPECT_EQ(to_low(0x1p-25f, p), 0x0000);      // tie, down to even zero
  EXPECT_EQ(to_low(3 * 0x1p-25f, p), 0x0002);  // tie, up to even
  EXPECT_EQ(to_low(-1.5f * 0x1p-25f, p), 0x8001);
  EXPECT_EQ(to_low(1e-30f, p), 0x0000);
}

TEST(CastFromLow, IsExactAndRoundTripsEveryPattern) {
  EXPECT_EQ(from_low(0x3f80, LowPrecision::kBf16), 1.0f);
  EXPECT_EQ(from_low(0xc0a0, LowPrecision::kBf16), -5.0f);
  EXPECT_EQ(from_low(0x3555, LowPrecision::kF16), 0x1.554p-2f);
  EXPECT_EQ(from_low(0x0001, LowPrecision::kF16), 0x1p-24f);
  EXPECT_EQ(from_low(0x83ff, LowPrecision::kF16), -0x3ffp-24f);
  EXPECT_EQ(from_low(0xfc00, LowPrecision::kF16), -std::numeric_limits<float>::infinity());
  for (LowPrecision p : kBoth) {
    std::vector<uint16_t> all(1 << 16);
    for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
    std::vector<uint16_t> back = to_low(from_low(all, p), p);
    for (size_t i = 0; i < all.size(); ++i) {
      float v = from_low(all[i], p);
      if (std::isnan(v)) {
        ASSERT_TRUE(std::isnan(from_low(back[i], p))) << name_of(p) << " " << i;
      } else {
        ASSERT_EQ(back[i], all[i]) << name_of(p) << " " << i;
      }
    }
  }
}

// Checks every result against its neighbours, so this holds whatever the implementation: the
// chosen value is nearest to x, and on a tie its last bit is even.
TEST(CastToLow, PicksTheNearestValueAtEveryArrayPosition) {
  for (LowPrecision p : kBoth) {
    CounterRng rng(7, 0);
    std::vector<float> x(1000 + 13);
    for (size_t i = 0; i < x.size(); ++i) {
      if (p == LowPrecision::kBf16) {
        x[i] = std::bit_cast<float>(uint32_t(rng.bits(i)));
      } else {  // the whole f16 range, subnormals and overflow included
        double magnitude = std::ldexp(1.0 + rng.uniform(3 * i), int(rng.below(3 * i + 1, 42)) - 26);
        x[i] = float(rng.below(3 * i + 2, 2) ? -magnitude : magnitude);
      }
    }
    std::vector<uint16_t> y = to_low(x, p);
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(x[i])) continue;
      double v = from_low(y[i], p), err = std::abs(v - double(x[i]));
      if (std::isinf(v)) continue;  // overflow is checked by value above
      for (int step : {-1, 1}) {
        double u = from_low(uint16_t(y[i] + step), p);
        if (std::isnan(u) || std::isinf(u)) continue;
        double other = std::abs(u - double(x[i]));
        ASSERT_LE(err, other) << name_of(p) << " x=" << x[i] << " at " << i;
        if (err == other) {
          ASSERT_EQ(y[i] & 1, 0) << name_of(p) << " tie x=" << x[i];
        }
      }
    }
  }
}

TEST(CastToLow, Bf16MatchesTheCoreScalarConversion) {
  CounterRng rng(11, 0);
  std::vector<float> x(100000 + 5);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = std::bit_cast<float>(uint32_t(rng.bits(i)));
  }
  std::vector<uint16_t> y = to_low(x, LowPrecision::kBf16);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], f32_to_bf16(x[i])) << i;
}

// f64 reference on the values the low-precision inputs hold, with the bound a sum of K
// products accumulated in f32 can reach.
// Padded leading dimensions send oneDNN to other kernels than dense ones, so both are checked.
void check_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, float beta,
                bool padded, LowPrecision p) {
  const int64_t lda = (ta ? M : K) + 3 * padded, ldb = (tb ? K : N) + 5 * padded;
  const int64_t ldc = N + 2 * padded;
  const int64_t a_rows = ta ? K : M, b_rows = tb ? N : K;
  std::vector<uint16_t> A = to_low(random_vector<float>(a_rows * lda, 1), p);
  std::vector<uint16_t> B = to_low(random_vector<float>(b_rows * ldb, 2), p);
  std::vector<float> a = from_low(A, p), b = from_low(B, p);
  std::vector<float> c0 = random_vector<float>(M * ldc, 3);
  // With beta 0, C must not be read: NaN there would poison the result.
  if (beta == 0.0f) {
    for (int64_t i = 0; i < M; ++i) {
      for (int64_t j = 0; j < N; ++j) c0[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
    }
  }
  std::vector<float> fast = c0, portable = c0;
  {
    PathScope scope(LowPrecisionGemmPath::kOneDnn);
    gemm_low(kCpuContext, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta, fast.data(),
             ldc, p);
  }
  {
    PathScope scope(LowPrecisionGemmPath::kPortable);
    gemm_low(kCpuContext, ta, tb, M, N, K, alpha, A.data(), lda, B.data(), ldb, beta,
             portable.data(), ldc, p);
  }
  const std::string where = fmt::format("{} ta={} tb={} M={} N={} K={} alpha={} beta={} padded={}",
                                        name_of(p), ta, tb, M, N, K, alpha, beta, padded);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0, magnitude = 0;
      for (int64_t k = 0; k < K; ++k) {
        double prod = double(ta ? a[k * lda + i] : a[i * lda + k]) *
                      double(tb ? b[j * ldb + k] : b[k * ldb + j]);
        sum += prod;
        magnitude += std::abs(prod);
      }
      double c = beta == 0.0f ? 0.0 : double(c0[i * ldc + j]);
      double ref = alpha * sum + beta * c;
      double bound = 1e-6 * (K + 2) * (std::abs(alpha) * magnitude + std::abs(beta * c)) + 1e-30;
      ASSERT_NEAR(fast[i * ldc + j], ref, bound) << where << " at " << i << "," << j;
      ASSERT_NEAR(portable[i * ldc + j], ref, bound) << where << " at " << i << "," << j;
    }
    for (int64_t j = N; j < ldc; ++j) {  // padding beyond N stays untouched
      ASSERT_EQ(fast[i * ldc + j], c0[i * ldc + j]) << where;
      ASSERT_EQ(portable[i * ldc + j], c0[i * ldc + j]) << where;
    }
  }
}

TEST(GemmLow, MatchesF64ForEveryTransposeSizeAndScale) {
  const int64_t sizes[][3] = {{1, 1, 1}, {7, 33, 130}, {130, 7, 33}, {33, 130, 7}, {1, 130, 33}};
  for (LowPrecision p : kBoth) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        for (auto [M, N, K] : sizes) {
          for (float alpha : {1.0f, -0.75f}) {
            for (float beta : {0.0f, 1.0f, 0.5f}) {
              for (bool padded : {false, true}) check_gemm(ta, tb, M, N, K, alpha, beta, padded, p);
            }
          }
        }
      }
    }
  }
}

TEST(GemmLow, EmptySumScalesC) {
  std::vector<float> c = {1.0f, 2.0f};
  gemm_low(kCpuContext, false, false, 1, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2,
           LowPrecision::kBf16);
  EXPECT_EQ(c, (std::vector<float>{0.5f, 1.0f}));
}

TEST(GemmLow, RejectsLeadingDimensionsSmallerThanTheRows) {
  std::vector<uint16_t> a(16), b(16);
  std::vector<float> c(16);
  EXPECT_THROW(gemm_low(kCpuContext, false, false, 4, 4, 4, 1.0f, a.data(), 3, b.data(), 4, 0.0f,
                        c.data(), 4, LowPrecision::kBf16),
               Error);
}

TEST(GemmLow, ReportsItsPath) {
  const std::string portable = "portable (f32 conversion + sgemm)";
  EXPECT_FALSE(low_precision_gemm_path(LowPrecision::kF16).empty());
  {
    // Where the CPU has AVX512_BF16, the oneDNN kernels are the ones compared above.
    PathScope scope(LowPrecisionGemmPath::kOneDnn);
    if (__builtin_cpu_supports("avx512bf16")) {
      EXPECT_EQ(low_precision_gemm_path(LowPrecision::kBf16).rfind("oneDNN matmul (", 0), 0u);
    }
  }
  PathScope scope(LowPrecisionGemmPath::kPortable);
  EXPECT_EQ(low_precision_gemm_path(LowPrecision::kBf16), portable);
  EXPECT_EQ(low_precision_gemm_path(LowPrecision::kF16), portable);
}

TEST(LinearLow, MatchesTheF32KernelsOnRoundedInputs) {
  const int64_t M = 37, in = 70, out = 45;
  for (LowPrecision p : kBoth) {
    std::vector<uint16_t> x = to_low(random_vector<float>(M * in, 1), p);
    std::vector<uint16_t> w = to_low(random_vector<float>(out * in, 2, 0.1), p);
    std::vector<float> b = random_vector<float>(out, 3), dy = random_vector<float>(M * out, 4);
    std::vector<uint16_t> dy_low = to_low(dy, p);
    std::vector<float> xr = from_low(x, p), wr = from_low(w, p), dyr = from_low(dy_low, p);

    std::vector<float> y(M * out), y_ref(M * out);
    linear_forward_low(kCpuContext, x.data(), w.data(), b.data(), y.data(), M, in, out, p);
    linear_forward<float>(kCpuContext, xr.data(), wr.data(), b.data(), y_ref.data(), M, in, out);
    for (int64_t i = 0; i < M * out; ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-4) << name_of(p) << i;
    linear_forward_low(kCpuContext, x.data(), w.data(), nullptr, y.data(), M, in, out, p);
    linear_forward<float>(kCpuContext, xr.data(), wr.data(), nullptr, y_ref.data(), M, in, out);
    for (int64_t i = 0; i < M * out; ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-4) << name_of(p) << i;

    // dw and db accumulate onto what is there; dx is overwritten.
    std::vector<float> dx(M * in, 9.0f), dw = random_vector<float>(out * in, 5),
                                         db = random_vector<float>(out, 6);
    std::vector<float> dx_ref(M * in), dw_ref = dw, db_ref = db;
    linear_backward_low(kCpuContext, dy.data(), dy_low.data(), x.data(), w.data(), dx.data(),
                        dw.data(), db.data(), M, in, out, p);
    linear_backward<float>(kCpuContext, dyr.data(), xr.data(), wr.data(), dx_ref.data(),
                           dw_ref.data(), nullptr, M, in, out);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t j = 0; j < out; ++j) db_ref[j] += dy[m * out + j];  // the f32 dy, in row order
    }
    for (int64_t i = 0; i < M * in; ++i) ASSERT_NEAR(dx[i], dx_ref[i], 1e-4) << name_of(p) << i;
    for (int64_t i = 0; i < out * in; ++i) ASSERT_NEAR(dw[i], dw_ref[i], 1e-4) << name_of(p) << i;
    EXPECT_EQ(db, db_ref) << name_of(p);

    std::vector<float> dw_before = dw;
    linear_backward_low(kCpuContext, nullptr, dy_low.data(), x.data(), w.data(), dx.data(),
                        dw.data(), nullptr, M, in, out, p);
    EXPECT_NE(dw, dw_before);
  }
}

// The fused update gives the bits of the separate passes it replaces: the gradients widened and
// scaled, adamw_update, then cast_to_low of the new weights.
TEST(AdamWUpdateLow, EqualsTheUpdateThenTheCast) {
  const int64_t n = 2500;  // blocks of 1024 and a remainder
  const AdamWParams hyper{3e-4, 0.9, 0.95, 1e-8, 0.1, 7};
  const std::vector<float> master0 = random_vector<float>(n, 1);
  const std::vector<float> m0 = random_vector<float>(n, 2, 1e-3);
  std::vector<float> v0 = random_vector<float>(n, 3, 1e-6);
  for (float& x : v0) x = std::fabs(x);
  std::vector<float> grad = random_vector<float>(n, 4, 1e-2);
  std::vector<uint16_t> grad_bf16(n);
  cast_to_low(kCpuContext, grad.data(), grad_bf16.data(), n, LowPrecision::kBf16);
  for (const LowPrecision p : {LowPrecision::kBf16, LowPrecision::kF16}) {
    for (const bool bf16_grads : {false, true}) {
      for (const float scale : {1.0f, 0.37f}) {
        SCOPED_TRACE(fmt::format("bf16 grads {} scale {}", bf16_grads, scale));
        std::vector<float> g = grad;
        if (bf16_grads)
          cast_from_low(kCpuContext, grad_bf16.data(), g.data(), n, LowPrecision::kBf16);
        for (float& x : g) x *= scale;
        std::vector<float> want = master0, want_m = m0, want_v = v0;
        adamw_update<float>(kCpuContext, want.data(), g.data(), want_m.data(), want_v.data(), n,
                            hyper);
        std::vector<uint16_t> want_low(n);
        cast_to_low(kCpuContext, want.data(), want_low.data(), n, p);

        std::vector<float> got = master0, got_m = m0, got_v = v0;
        std::vector<uint16_t> got_low(n);
        adamw_update_low(kCpuContext, got.data(), bf16_grads ? nullptr : grad.data(),
                         bf16_grads ? grad_bf16.data() : nullptr, scale, got_m.data(), got_v.data(),
                         n, hyper, got_low.data(), p);
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(got_m[i]), std::bit_cast<uint32_t>(want_m[i])) << i;
          ASSERT_EQ(std::bit_cast<uint32_t>(got_v[i]), std::bit_cast<uint32_t>(want_v[i])) << i;
          ASSERT_EQ(got_low[i], want_low[i]) << i;
        }
      }
    }
  }
  std::vector<float> w(4), m(4), v(4);
  std::vector<uint16_t> low(4);
  EXPECT_THROW(adamw_update_low(kCpuContext, w.data(), nullptr, nullptr, 1.0f, m.data(), v.data(),
                                4, hyper, low.data(), LowPrecision::kBf16),
               Error);
}

TEST(AllFinite, FindsInfAndNanAnywhere) {
  EXPECT_TRUE(all_finite(kCpuContext, nullptr, 0));
  const float bad[] = {std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0xff800001u)};
  for (int64_t n : {1, 15, 16, 17, 1000, 100000, (1 << 20) + 3}) {
    std::vector<float> x = random_vector<float>(n, 8, 1e3);
    x[0] = std::numeric_limits<float>::max();
    x[n / 2] = std::numeric_limits<float>::denorm_min();
    ASSERT_TRUE(all_finite(kCpuContext, x.data(), n)) << n;
    for (int64_t at : {int64_t(0), n / 3, n - 1}) {
      for (float v : bad) {
        float saved = x[at];
        x[at] = v;
        ASSERT_FALSE(all_finite(kCpuContext, x.data(), n)) << n << " " << at << " " << v;
        x[at] = saved;
      }
    }
  }
}

}  // namespace
}  // namespace tessera::kernels
