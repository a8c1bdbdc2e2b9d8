#include "tessera/core/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>

namespace tessera {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

TEST(HugePages, LargeBuffersStartOnAHugePageAndSmallOnesAtTheirAlignment) {
  void* large = allocate_large(3 * kHugePageBytes + 5);
  void* small = allocate_large(100, 256);
  EXPECT_EQ(address(large) % kHugePageBytes, 0u);
  EXPECT_EQ(address(small) % 256, 0u);
  free_large(large);
  free_large(small);
}

TEST(HugePages, AVectorOverThemHoldsItsValues) {
  LargeVector<float> v(size_t{3} << 20);
  std::iota(v.begin(), v.end(), 0.0f);
  EXPECT_EQ(address(v.data()) % kHugePageBytes, 0u);
  EXPECT_EQ(v[12345], 12345.0f);
  LargeVector<float> copy = v;
  EXPECT_EQ(copy.back(), float(v.size() - 1));
}

}  // namespace
}  // namespace tessera
