#include <gtest/gtest.h>

#include "tessera/core/arena.h"
#include "tessera/core/rng.h"

namespace tessera {

TEST(Arena, CountingPassSizesTheRealArena) {
  Arena counting = Arena::counting();
  Tensor a = counting.allocate({3, 5}, DType::f32);
  counting.allocate({7}, DType::bf16);
  EXPECT_EQ(a.data, nullptr);
  Arena real(counting.used());
  Tensor x = real.allocate({3, 5}, DType::f32);
  Tensor y = real.allocate({7}, DType::bf16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(x.data) % Arena::kAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y.data) % Arena::kAlignment, 0u);
  EXPECT_EQ(real.used(), counting.used());
  EXPECT_THROW(real.allocate({1}, DType::f32), Error);
}

TEST(Tensor, TypedAccessChecksDtype) {
  Arena arena(1024);
  Tensor t = arena.allocate({2, 3}, DType::f32);
  EXPECT_EQ(t.numel(), 6);
  EXPECT_NO_THROW(t.as<float>());
  EXPECT_THROW(t.as<int32_t>(), Error);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.00390625f)), 1.0f);  // halfway, rounds to even
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.01171875f)), 1.015625f);
}

TEST(CounterRng, IsAPureFunctionOfSeedStreamAndCounter) {
  CounterRng a(7, 1), b(7, 1), c(7, 2);
  EXPECT_EQ(a.bits(5), b.bits(5));
  EXPECT_NE(a.bits(5), c.bits(5));
  double sum = 0, sq = 0;
  for (int i = 0; i < 20000; ++i) {
    double z = a.normal(i);
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / 20000, 0.0, 0.03);
  EXPECT_NEAR(sq / 20000, 1.0, 0.05);
}

}  // namespace tessera
