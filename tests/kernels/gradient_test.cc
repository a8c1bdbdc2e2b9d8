#include <gtest/gtest.h>
#include <omp.h>

#include "tessera/kernels/ops.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;
using testing::weighted_sum;

template <typename T>
class KernelGradient : public ::testing::Test {};
TYPED_TEST_SUITE(KernelGradient, testing::GradientPrecisions);

TYPED_TEST(KernelGradient, Linear) {
  using T = TypeParam;
  const int64_t M = 5, in = 7, out = 6;
  auto x = random_vector<T>(M * in, 1), w = random_vector<T>(out * in, 2),
       b = random_vector<T>(out, 3), r = random_vector<T>(M * out, 4);
  std::vector<T> y(M * out), dx(M * in), dw(out * in), db(out);
  auto loss = [&] {
    linear_forward<T>(kCpuContext, x.data(), w.data(), b.data(), y.data(), M, in, out);
    return weighted_sum(y, r);
  };
  loss();
  linear_backward<T>(kCpuContext, r.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), M,
                     in, out);
  EXPECT_GRADIENT(x, loss, dx);
  EXPECT_GRADIENT(w, loss, dw);
  EXPECT_GRADIENT(b, loss, db);
}

TYPED_TEST(KernelGradient, LayerNorm) {
  using T = TypeParam;
  const int64_t M = 4, C = 9;
  auto x = random_vector<T>(M * C, 5), g = random_vector<T>(C, 6), bt = random_vector<T>(C, 7),
       r = random_vector<T>(M * C, 8);
  std::vector<T> y(M * C), mean(M), rstd(M), dx(M * C), dg(C), db(C);
  auto loss = [&] {
    layernorm_forward<T>(kCpuContext, x.data(), g.data(), bt.data(), y.data(), mean.data(),
                         rstd.data(), M, C);
    return weighted_sum(y, r);
  };
  loss();
  layernorm_backward<T>(kCpuContext, r.data(), x.data(), g.data(), mean.data(), rstd.data(),
                        dx.data(), dg.data(), db.data(), M, C);
  EXPECT_GRADIENT(x, loss, dx);
  EXPECT_GRADIENT(g, loss, dg);
  EXPECT_GRADIENT(bt, loss, db);
}

TYPED_TEST(KernelGradient, Gelu) {
  using T = TypeParam;
  const int64_t n = 40;
  auto x = random_vector<T>(n, 9, 2.0), r = random_vector<T>(n, 10);
  std::vector<T> y(n), dx(n);
  auto loss = [&] {
    gelu_forward<T>(kCpuContext, x.data(), y.data(), n);
    return weighted_sum(y, r);
  };
  gelu_backward<T>(kCpuContext, r.data(), x.data(), dx.data(), n);
  EXPECT_GRADIENT(x, loss, dx);
}

TYPED_TEST(KernelGradient, Embedding) {
  using T = TypeParam;
  const int64_t B = 2, Tn = 3, C = 4, V = 5;
  std::vector<int32_t> tokens = {0, 3, 3, 4, 1, 3};
  auto wte = random_vector<T>(V * C, 11), wpe = random_vector<T>(Tn * C, 12),
       r = random_vector<T>(B * Tn * C, 13);
  std::vector<T> x(B * Tn * C), dwte(V * C), dwpe(Tn * C);
  auto loss = [&] {
    embedding_forward<T>(kCpuContext, tokens.data(), wte.data(), wpe.data(), x.data(), B, Tn, C);
    return weighted_sum(x, r);
  };
  embedding_backward<T>(kCpuContext, r.data(), tokens.data(), dwte.data(), dwpe.data(), B, Tn, C);
  EXPECT_GRADIENT(wte, loss, dwte);
  EXPECT_GRADIENT(wpe, loss, dwpe);
}

TYPED_TEST(KernelGradient, CausalAttention) {
  using T = TypeParam;
  const int64_t B = 2, Tn = 5, C = 8, H = 2;
  auto qkv = random_vector<T>(B * Tn * 3 * C, 14), r = random_vector<T>(B * Tn * C, 15);
  std::vector<T> out(B * Tn * C), lse(B * H * Tn), dqkv(qkv.size());
  std::vector<T> scratch(attention_scratch_size(Tn) * omp_get_max_threads());
  auto loss = [&] {
    attention_forward<T>(kCpuContext, qkv.data(), out.data(), lse.data(), scratch.data(), B, Tn, H,
                         H, C / H);
    return weighted_sum(out, r);
  };
  loss();
  attention_backward<T>(kCpuContext, r.data(), qkv.data(), lse.data(), dqkv.data(), scratch.data(),
                        B, Tn, H, H, C / H);
  EXPECT_GRADIENT(qkv, loss, dqkv);
}

TYPED_TEST(KernelGradient, SoftmaxCrossEntropy) {
  using T = TypeParam;
  const int64_t M = 4, V = 11;
  std::vector<int32_t> targets = {0, 10, 3, 3};
  auto logits = random_vector<T>(M * V, 16, 2.0);
  std::vector<T> work(M * V), losses(M);
  auto loss = [&] {
    work = logits;
    softmax_cross_entropy<T>(kCpuContext, work.data(), targets.data(), losses.data(), M, V, T(0));
    double mean = 0;
    for (T l : losses) mean += double(l) / M;
    return mean;
  };
  work = logits;
  softmax_cross_entropy<T>(kCpuContext, work.data(), targets.data(), losses.data(), M, V,
                           T(1.0 / M));
  std::vector<T> grad = work;
  EXPECT_GRADIENT(logits, loss, grad);
}

TYPED_TEST(KernelGradient, Add) {
  using T = TypeParam;
  auto a = random_vector<T>(10, 17), b = random_vector<T>(10, 18), r = random_vector<T>(10, 19);
  std::vector<T> out(10);
  auto loss = [&] {
    add<T>(kCpuContext, a.data(), b.data(), out.data(), 10);
    return weighted_sum(out, r);
  };
  EXPECT_GRADIENT(a, loss, r);
  EXPECT_GRADIENT(b, loss, r);
}

}  // namespace
}  // namespace tessera::kernels
