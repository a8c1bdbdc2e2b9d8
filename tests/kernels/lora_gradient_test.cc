// LoRA's update y += scale (x A^T) B^T (kernels/lora.h) against central finite differences, in f64
// and f32, for the shapes each target role gives it: a fused projection of several pieces (Llama's
// q, k and v; gate and up), each with its own block of A, and a single piece (GPT-2's c_attn, the
// attention and MLP output projections).
#include <gtest/gtest.h>

#include <vector>

#include "tessera/kernels/lora.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::kernels {
namespace {

using testing::random_vector;
using testing::weighted_sum;

template <typename T>
class LoraGradient : public ::testing::Test {};
TYPED_TEST_SUITE(LoraGradient, testing::GradientPrecisions);

// Checks dx, dA and dB of the update alone (the linear's own matmul is linear_backward's).
template <typename T>
void check_lora(std::vector<int64_t> widths, int64_t in, int64_t rank, T scale) {
  using TypeParam = T;  // EXPECT_GRADIENT's tolerance
  const int64_t M = 5, pieces = int64_t(widths.size()), cols = pieces * rank;
  int64_t out = 0;
  for (int64_t w : widths) out += w;
  auto x = random_vector<T>(M * in, 1), a = random_vector<T>(cols * in, 2, 0.5),
       b = random_vector<T>(out * rank, 3, 0.5), r = random_vector<T>(M * out, 4);
  std::vector<T> u(M * cols), du(M * cols), y(M * out), dx(M * in), da(cols * in), db(out * rank);
  auto loss = [&] {
    std::fill(y.begin(), y.end(), T(0));
    lora_down<T>(kCpuContext, x.data(), a.data(), u.data(), M, in, cols);
    lora_up<T>(kCpuContext, u.data(), b.data(), y.data(), M, rank, widths, scale);
    return weighted_sum(y, r);
  };
  loss();
  lora_up_backward<T>(kCpuContext, r.data(), u.data(), b.data(), du.data(), db.data(), M, rank,
                      widths, scale);
  lora_down_backward<T>(kCpuContext, du.data(), x.data(), a.data(), da.data(), dx.data(), M, in,
                        cols);
  EXPECT_GRADIENT(x, loss, dx);
  EXPECT_GRADIENT(a, loss, da);
  EXPECT_GRADIENT(b, loss, db);
}

TYPED_TEST(LoraGradient, FusedQkvOfThreePieces) { check_lora<TypeParam>({6, 3, 3}, 7, 2, 2.0); }

TYPED_TEST(LoraGradient, FusedGateAndUpOfTwoPieces) { check_lora<TypeParam>({5, 5}, 6, 3, 0.5); }

TYPED_TEST(LoraGradient, OneProjection) { check_lora<TypeParam>({8}, 6, 4, 4.0); }

// Each piece writes only its own columns of y: B_j's rows meet A_j's block and no other.
TEST(Lora, PiecesStayInTheirColumns) {
  const int64_t M = 3, in = 4, rank = 2;
  const std::vector<int64_t> widths = {3, 2};
  std::vector<double> x = random_vector<double>(M * in, 5), a(2 * rank * in, 0.0),
                      b = random_vector<double>(5 * rank, 6), u(M * 2 * rank), y(M * 5, 0.0);
  for (int64_t i = 0; i < rank * in; ++i) a[i] = 1.0;  // A_1 = 0: the second piece is unchanged
  lora_down<double>(kCpuContext, x.data(), a.data(), u.data(), M, in, 2 * rank);
  lora_up<double>(kCpuContext, u.data(), b.data(), y.data(), M, rank, widths, 1.0);
  for (int64_t m = 0; m < M; ++m) {
    EXPECT_NE(y[m * 5], 0.0);
    EXPECT_EQ(y[m * 5 + 3], 0.0);
    EXPECT_EQ(y[m * 5 + 4], 0.0);
  }
}

}  // namespace
}  // namespace tessera::kernels
