#include "tessera/core/checksum.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace tessera {
namespace {

// The value every CRC-32 (zlib, PNG, gzip, Python's zlib.crc32) gives for "123456789".
TEST(Crc32, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  EXPECT_EQ(crc32("a", 1), 0xE8B7BE43u);
}

TEST(Crc32, ContinuesOverPiecesOfAnyLength) {
  std::vector<unsigned char> bytes(3 << 20);
  std::mt19937 rng(7);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  const uint32_t whole = crc32(bytes.data(), bytes.size());
  for (size_t cut : {size_t{1}, size_t{15}, size_t{64}, size_t{4097}, size_t{1} << 20}) {
    uint32_t c = crc32(bytes.data(), cut);
    c = crc32(bytes.data() + cut, bytes.size() - cut, c);
    EXPECT_EQ(c, whole) << "cut at " << cut;
    const uint32_t rest = crc32(bytes.data() + cut, bytes.size() - cut);
    EXPECT_EQ(crc32_combine(crc32(bytes.data(), cut), rest, bytes.size() - cut), whole);
  }
  bytes[12345] ^= 1;
  EXPECT_NE(crc32(bytes.data(), bytes.size()), whole);
}

}  // namespace
}  // namespace tessera
