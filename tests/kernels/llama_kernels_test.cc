#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;
using testing::weighted_sum;

template <typename T>
class LlamaKernelGradient : public ::testing::Test {};
TYPED_TEST_SUITE(LlamaKernelGradient, testing::GradientPrecisions);

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

TYPED_TEST(LlamaKernelGradient, SwiGlu) {
  using T = TypeParam;
  const int64_t M = 3, F = 7;
  auto gate_up = random_vector<T>(M * 2 * F, 21, 2.0), r = random_vector<T>(M * F, 22);
  std::vector<T> out(M * F), dgate_up(M * 2 * F);
  auto loss = [&] {
    swiglu_forward<T>(kCpuContext, gate_up.data(), out.data(), M, F);
    return weighted_sum(out, r);
  };
  swiglu_backward<T>(kCpuContext, r.data(), gate_up.data(), dgate_up.data(), M, F);
  EXPECT_GRADIENT(gate_up, loss, dgate_up);
}

// dx and dgamma start from non-zero values so that the test also checks that backward accumulates.
TYPED_TEST(LlamaKernelGradient, RmsNorm) {
  using T = TypeParam;
  const int64_t M = 4, C = 9;
  auto x = random_vector<T>(M * C, 23), g = random_vector<T>(C, 24),
       r = random_vector<T>(M * C, 25), dx0 = random_vector<T>(M * C, 26),
       dg0 = random_vector<T>(C, 27);
  std::vector<T> y(M * C), rstd(M), dx = dx0, dg = dg0;
  auto loss = [&] {
    rmsnorm_forward<T>(kCpuContext, x.data(), g.data(), y.data(), rstd.data(), M, C, T(1e-5));
    return weighted_sum(y, r);
  };
  loss();
  rmsnorm_backward<T>(kCpuContext, r.data(), x.data(), g.data(), rstd.data(), dx.data(), dg.data(),
                      M, C);
  for (int64_t i = 0; i < M * C; ++i) dx[i] -= dx0[i];
  for (int64_t c = 0; c < C; ++c) dg[c] -= dg0[c];
  EXPECT_GRADIENT(x, loss, dx);
  EXPECT_GRADIENT(g, loss, dg);
}

// QK-norm over the rope layout: 3 query heads and 1 key head are normed by their own gains, the
// value head passes untouched; its gradient rows stay as they came in.
TYPED_TEST(LlamaKernelGradient, HeadRmsNorm) {
  using T = TypeParam;
  const int64_t N = 3, H = 3, KVH = 1, hd = 6, W = (H + 2 * KVH) * hd;
  auto qkv = random_vector<T>(N * W, 31), gq = random_vector<T>(hd, 32),
       gk = random_vector<T>(hd, 33), r = random_vector<T>(N * W, 34),
       dgq0 = random_vector<T>(hd, 35), dgk0 = random_vector<T>(hd, 36);
  std::vector<T> y, x(N * (H + KVH) * hd), rstd(N * (H + KVH)), dgq = dgq0, dgk = dgk0;
  auto loss = [&] {
    y = qkv;
    head_rmsnorm_forward<T>(kCpuContext, y.data(), gq.data(), gk.data(), x.data(), rstd.data(), N,
                            H, KVH, hd, T(1e-6));
    return weighted_sum(y, r);
  };
  loss();
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = (H + KVH) * hd; c < W; ++c) EXPECT_EQ(y[n * W + c], qkv[n * W + c]);
  }
  std::vector<T> d = r;
  head_rmsnorm_backward<T>(kCpuContext, d.data(), x.data(), gq.data(), gk.data(), rstd.data(),
                           dgq.data(), dgk.data(), N, H, KVH, hd);
  for (int64_t c = 0; c < hd; ++c) {
    dgq[c] -= dgq0[c];
    dgk[c] -= dgk0[c];
  }
  EXPECT_GRADIENT(qkv, loss, d);
  EXPECT_GRADIENT(gq, loss, dgq);
  EXPECT_GRADIENT(gk, loss, dgk);
}

TYPED_TEST(LlamaKernelGradient, Rope) {
  using T = TypeParam;
  const int64_t B = 2, Tn = 3, H = 2, KVH = 1, hd = 6, pos0 = 5;
  const double theta = 10000;
  auto qkv = random_vector<T>(B * Tn * (H + 2 * KVH) * hd, 28),
       r = random_vector<T>(qkv.size(), 29);
  std::vector<T> work;
  auto loss = [&] {
    work = qkv;
    rope_forward<T>(kCpuContext, work.data(), B, Tn, H, KVH, hd, pos0, Rope{theta});
    return weighted_sum(work, r);
  };
  std::vector<T> grad = r;
  rope_backward<T>(kCpuContext, grad.data(), B, Tn, H, KVH, hd, pos0, Rope{theta});
  EXPECT_GRADIENT(qkv, loss, grad);
}

TYPED_TEST(LlamaKernelGradient, GroupedQueryAttention) {
  using T = TypeParam;
  const int64_t B = 2, Tn = 5, H = 4, hd = 3;
  for (int64_t KVH : {2, 1}) {
    auto qkv = random_vector<T>(B * Tn * (H + 2 * KVH) * hd, 30),
         r = random_vector<T>(B * Tn * H * hd, 31);
    std::vector<T> out(r.size()), lse(B * H * Tn), dqkv(qkv.size());
    std::vector<T> scratch(attention_scratch_size(Tn) * omp_get_max_threads());
    auto loss = [&] {
      attention_forward<T>(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(), B, Tn,
                           H, KVH, hd);
      return weighted_sum(out, r);
    };
    loss();
    attention_backward<T>(kCpuContext, r.data(), qkv.data(), lse.data(), dqkv.data(),
                          scratch.data(), B, Tn, H, KVH, hd);
    EXPECT_GRADIENT(qkv, loss, dqkv) << "KVH=" << KVH;
  }
}

TEST(Rope, BackwardIsTheExactAdjointAndLeavesValuesAlone) {
  const int64_t B = 2, Tn = 4, H = 4, KVH = 2, hd = 8, ld = (H + 2 * KVH) * hd;
  auto x = random_vector<double>(B * Tn * ld, 32), y = random_vector<double>(x.size(), 33);
  std::vector<double> rx = x, ry = y;
  rope_forward<double>(kCpuContext, rx.data(), B, Tn, H, KVH, hd, 7, Rope{500000.0});
  rope_backward<double>(kCpuContext, ry.data(), B, Tn, H, KVH, hd, 7, Rope{500000.0});
  EXPECT_NEAR(dot(rx, y), dot(x, ry), 1e-12);
  for (int64_t row = 0; row < B * Tn; ++row) {
    for (int64_t c = (H + KVH) * hd; c < ld; ++c) {
      ASSERT_EQ(rx[row * ld + c], x[row * ld + c]);
      ASSERT_EQ(ry[row * ld + c], y[row * ld + c]);
    }
  }
}

TEST(Rope, PreservesTheNormOfEveryPair) {
  const int64_t B = 1, Tn = 6, H = 2, KVH = 2, hd = 10, ld = (H + 2 * KVH) * hd;
  auto x = random_vector<double>(B * Tn * ld, 34);
  std::vector<double> rx = x;
  rope_forward<double>(kCpuContext, rx.data(), B, Tn, H, KVH, hd, 1000, Rope{10000.0});
  for (int64_t row = 0; row < B * Tn; ++row) {
    for (int64_t head = 0; head < H + KVH; ++head) {
      for (int64_t i = 0; i < hd / 2; ++i) {
        int64_t a = row * ld + head * hd + i, b = a + hd / 2;
        ASSERT_NEAR(std::hypot(rx[a], rx[b]), std::hypot(x[a], x[b]), 1e-12);
      }
    }
  }
}

// theta = 10^4 and hd = 8 make pair 1's frequency 10^4^(-2/8) = 0.1, so position 4 turns it by 0.4.
TEST(Rope, TurnsAPairByTheKnownAngle) {
  const int64_t H = 1, KVH = 1, hd = 8, ld = (H + 2 * KVH) * hd;
  std::vector<double> qkv(2 * ld, 0.0);
  double* row = qkv.data() + ld;  // t = 1, so pos = pos0 + 1 = 4
  for (int64_t head : {0, 1}) {
    row[head * hd + 1] = 1.0;
    row[head * hd + 1 + hd / 2] = 2.0;
  }
  rope_forward<double>(kCpuContext, qkv.data(), 1, 2, H, KVH, hd, 3, Rope{10000.0});
  const double c = std::cos(0.4), s = std::sin(0.4);
  for (int64_t head : {0, 1}) {
    EXPECT_NEAR(row[head * hd + 1], 1.0 * c - 2.0 * s, 1e-14);
    EXPECT_NEAR(row[head * hd + 1 + hd / 2], 2.0 * c + 1.0 * s, 1e-14);
  }
}

TEST(Rope, RejectsAnOddOrOversizedHeadDimension) {
  std::vector<double> qkv(3 * 2 * (kRopeMaxHeadDim + 2));
  EXPECT_THROW(rope_forward<double>(kCpuContext, qkv.data(), 1, 1, 1, 1, 3, 0, Rope{10000.0}),
               Error);
  EXPECT_THROW(rope_forward<double>(kCpuContext, qkv.data(), 1, 1, 1, 1, kRopeMaxHeadDim + 2, 0,
                                    Rope{10000.0}),
               Error);
}

// Grouped-query attention must be plain multi-head attention over key/value heads repeated to H.
TEST(GroupedQueryAttention, EqualsAttentionOverRepeatedKeyValueHeads) {
  const int64_t B = 2, Tn = 6, H = 4, hd = 5, C = H * hd;
  for (int64_t KVH : {2, 1}) {
    const int64_t group = H / KVH, ld = (H + 2 * KVH) * hd;
    auto qkv = random_vector<double>(B * Tn * ld, 35), dout = random_vector<double>(B * Tn * C, 36);
    std::vector<double> full(B * Tn * 3 * C);
    for (int64_t row = 0; row < B * Tn; ++row) {
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t c = 0; c < hd; ++c) {
          const double* src = qkv.data() + row * ld;
          double* dst = full.data() + row * 3 * C;
          dst[h * hd + c] = src[h * hd + c];
          dst[C + h * hd + c] = src[(H + h / group) * hd + c];
          dst[2 * C + h * hd + c] = src[(H + KVH + h / group) * hd + c];
        }
      }
    }
    std::vector<double> scratch(attention_scratch_size(Tn) * omp_get_max_threads());
    std::vector<double> out(B * Tn * C), out_full(out.size()), lse(B * H * Tn),
        lse_full(lse.size()), dqkv(qkv.size()), dfull(full.size());
    attention_forward<double>(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(), B,
                              Tn, H, KVH, hd);
    attention_forward<double>(kCpuContext, full.data(), out_full.data(), lse_full.data(),
                              scratch.data(), B, Tn, H, H, hd);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], out_full[i], 1e-12) << i;
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lse_full[i], 1e-12) << i;

    attention_backward<double>(kCpuContext, dout.data(), qkv.data(), lse.data(), dqkv.data(),
                               scratch.data(), B, Tn, H, KVH, hd);
    attention_backward<double>(kCpuContext, dout.data(), full.data(), lse_full.data(), dfull.data(),
                               scratch.data(), B, Tn, H, H, hd);
    for (int64_t row = 0; row < B * Tn; ++row) {
      const double* d = dqkv.data() + row * ld;
      const double* df = dfull.data() + row * 3 * C;
      for (int64_t c = 0; c < C; ++c) ASSERT_NEAR(d[c], df[c], 1e-12);
      for (int64_t g = 0; g < KVH; ++g) {
        for (int64_t c = 0; c < hd; ++c) {
          double dk = 0, dv = 0;
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            dk += df[C + h * hd + c];
            dv += df[2 * C + h * hd + c];
          }
          ASSERT_NEAR(d[(H + g) * hd + c], dk, 1e-12) << "KVH=" << KVH;
          ASSERT_NEAR(d[(H + KVH + g) * hd + c], dv, 1e-12) << "KVH=" << KVH;
        }
      }
    }
  }
}

TEST(GroupedQueryAttention, RejectsHeadsThatDoNotGroupEvenly) {
  std::vector<double> qkv(7 * 2), out(3 * 2), lse(3),
      scratch(attention_scratch_size(1) * omp_get_max_threads());
  EXPECT_THROW(attention_forward<double>(kCpuContext, qkv.data(), out.data(), lse.data(),
                                         scratch.data(), 1, 1, 3, 2, 2),
               Error);
}

}  // namespace
}  // namespace tessera::kernels
