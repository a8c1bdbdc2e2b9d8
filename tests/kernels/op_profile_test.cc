#include "tessera/kernels/op_profile.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "tessera/kernels/ops.h"

namespace tessera::kernels {
namespace {

TEST(OpProfile, EachCallCountsOnceInItsClassWithItsWork) {
  const int64_t M = 8, N = 6, K = 4;
  std::vector<float> a(M * K, 1.0f), b(K * N, 1.0f), c(M * N);
  const int64_t B = 1, T = 16, H = 2, hd = 4, C = H * hd;
  std::vector<float> qkv(B * T * 3 * C, 0.1f), out(B * T * C), lse(B * H * T);
  std::vector<float> scratch(attention_scratch_size(T) * omp_get_max_threads());
  std::vector<float> x(M * C, 1.0f), gamma(C, 1.0f), beta(C), y(M * C), mean(M), rstd(M);

  gemm<float>(kCpuContext, false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(),
              N);  // before the profile starts: not counted
  start_op_profile();
  gemm<float>(kCpuContext, false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(),
              N);
  // Attention runs gemms of its own: they are attention's time, not matmul's.
  attention_forward(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(), B, T, H, H,
                    hd);
  layernorm_forward(kCpuContext, x.data(), gamma.data(), beta.data(), y.data(), mean.data(),
                    rstd.data(), M, C);
  const OpProfile p = stop_op_profile();
  gemm<float>(kCpuContext, false, false, M, N, K, 1.0f, a.data(), K, b.data(), N, 0.0f, c.data(),
              N);  // after it stopped

  const OpTotals& matmul = p[int(OpClass::kMatmul)];
  EXPECT_EQ(matmul.calls, 1);
  EXPECT_EQ(matmul.flops, 2.0 * M * N * K);
  const OpTotals& attention = p[int(OpClass::kAttention)];
  EXPECT_EQ(attention.calls, 1);
  EXPECT_EQ(attention.flops, 4.0 * B * H * T * T * hd);
  EXPECT_GT(attention.seconds, 0.0);
  const OpTotals& norms = p[int(OpClass::kNormsActivations)];
  EXPECT_EQ(norms.calls, 1);
  EXPECT_EQ(norms.bytes, 2.0 * sizeof(float) * M * C);
  EXPECT_EQ(p[int(OpClass::kLoss)].calls, 0);
  EXPECT_EQ(op_class_name(OpClass::kNormsActivations), "norms/activations");
}

}  // namespace
}  // namespace tessera::kernels
