// ggml's block encodings decoded to f32, each checked on blocks built here from its layout: the
// 4-bit pairs of q4_0 and q4_1, q4_k's and q5_k's 6-bit sub-block scales and mins (the four
// later sub-blocks' high bits packed apart), q5_k's fifth bits and q6_k's 2-bit high parts.
#include "tessera/interop/ggml_types.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::interop {
namespace {

void put_half(std::vector<uint8_t>& b, size_t at, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(b.data() + at, &h, 2);
}

std::vector<float> decoded(GgmlType type, const std::vector<uint8_t>& block) {
  std::vector<float> out(size_t(ggml_block(type).values));
  ggml_to_f32(type, block, out);
  return out;
}

TEST(GgmlTypes, Q4_0AndQ4_1PairNibblesAcrossTheBlock) {
  std::vector<uint8_t> b(18);
  put_half(b, 0, 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = uint8_t(j | (15 - j) << 4);
  const std::vector<float> q4_0 = decoded(GgmlType::q4_0, b);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(q4_0[j], 0.5f * float(j - 8));
    EXPECT_EQ(q4_0[j + 16], 0.5f * float(7 - j));
  }
  std::vector<uint8_t> c(20);
  put_half(c, 0, 0.25f);
  put_half(c, 2, -1.0f);
  for (int j = 0; j < 16; ++j) c[4 + j] = uint8_t(j | 3 << 4);
  const std::vector<float> q4_1 = decoded(GgmlType::q4_1, c);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(q4_1[j], 0.25f * float(j) - 1.0f);
    EXPECT_EQ(q4_1[j + 16], 0.25f * 3 - 1.0f);
  }
}

// 8 sub-block scales and mins of 6 bits into q4_k's 12 bytes: the first four in the low 6 bits of
// bytes 0-3 and 4-7, the last four's low 4 bits in bytes 8-11 and their high 2 bits in the top of
// bytes 0-7.
std::vector<uint8_t> packed_scales(const int* scale, const int* min) {
  std::vector<uint8_t> q(12, 0);
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t(scale[j] | (scale[j + 4] >> 4) << 6);
    q[j + 4] = uint8_t(min[j] | (min[j + 4] >> 4) << 6);
    q[j + 8] = uint8_t((scale[j + 4] & 15) | (min[j + 4] & 15) << 4);
  }
  return q;
}

TEST(GgmlTypes, Q4_KAndQ5_KScaleEachSubBlock) {
  const int scale[8] = {1, 2, 3, 63, 17, 40, 5, 33};
  const int min[8] = {0, 7, 62, 1, 48, 2, 31, 16};
  const std::vector<uint8_t> scales = packed_scales(scale, min);
  std::vector<uint8_t> q4k(144), q5k(176);
  for (std::vector<uint8_t>* b : {&q4k, &q5k}) {
    put_half(*b, 0, 0.5f);
    put_half(*b, 2, 0.25f);
    std::copy(scales.begin(), scales.end(), b->begin() + 4);
  }
  // Value i of the block: sub-block s = i / 32, nibble q = i % 16 (the low nibble of byte
  // 32 (s / 2) + i % 32 for even s, the high one for odd s); q5_k adds 16 where bit s of the
  // high byte i % 32 is set.
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, byte = 32 * (s / 2) + i % 32, q = i % 16;
    q4k[16 + byte] |= uint8_t(s % 2 == 0 ? q : q << 4);
    q5k[48 + byte] |= uint8_t(s % 2 == 0 ? q : q << 4);
    if (i % 3 == 0) q5k[16 + i % 32] |= uint8_t(1 << s);
  }
  const std::vector<float> four = decoded(GgmlType::q4_k, q4k);
  const std::vector<float> five = decoded(GgmlType::q5_k, q5k);
  for (int i = 0; i < 256; ++i) {
    const int s = i / 32, q = i % 16;
    const bool fifth = (q5k[16 + i % 32] >> s) & 1;
    EXPECT_EQ(four[i], 0.5f * float(scale[s]) * float(q) - 0.25f * float(min[s])) << i;
    EXPECT_EQ(five[i], 0.5f * float(scale[s]) * float(q + (fifth ? 16 : 0)) - 0.25f * float(min[s]))
        << i;
  }
}

TEST(GgmlTypes, Q6_KJoinsLowAndHighBitsUnderSignedScales) {
  std::vector<uint8_t> b(210, 0);
  put_half(b, 208, 0.125f);
  for (int s = 0; s < 16; ++s) b[192 + s] = uint8_t(int8_t(s % 2 == 0 ? s + 1 : -s));
  // Value i: half n = i / 128, quarter k = i % 128 / 32, l = i % 32; its low 4 bits are byte
  // 64 n + 32 (k % 2) + l of the low part (high nibble for k >= 2), its 2 high bits bits 2k of
  // byte 32 n + l of the high part; its scale is sub-block 8 n + 2 k + l / 16.
  std::vector<int> q6(256);
  for (int i = 0; i < 256; ++i) {
    const int n = i / 128, k = i % 128 / 32, l = i % 32;
    q6[i] = (i * 7 + 3) % 64;
    const int low = q6[i] & 15, high = q6[i] >> 4;
    b[64 * n + 32 * (k % 2) + l] |= uint8_t(k < 2 ? low : low << 4);
    b[128 + 32 * n + l] |= uint8_t(high << (2 * k));
  }
  const std::vector<float> v = decoded(GgmlType::q6_k, b);
  for (int i = 0; i < 256; ++i) {
    const int n = i / 128, k = i % 128 / 32, l = i % 32;
    const int8_t sc = int8_t(b[192 + 8 * n + 2 * k + l / 16]);
    EXPECT_EQ(v[i], 0.125f * float(sc) * float(q6[i] - 32)) << i;
  }
}

TEST(GgmlTypes, PlainFloatsAndSizes) {
  std::vector<uint8_t> b(4);
  const uint16_t bf16 = 0xC040, f16 = 0x3C00;
  std::memcpy(b.data(), &bf16, 2);
  std::memcpy(b.data() + 2, &f16, 2);
  std::vector<float> v(2);
  ggml_to_f32(GgmlType::bf16, b, v);
  EXPECT_EQ(v, (std::vector<float>{-3.0f, 0.0078125f}));
  ggml_to_f32(GgmlType::f16, b, v);
  EXPECT_EQ(v[1], 1.0f);
  EXPECT_EQ(ggml_bytes(GgmlType::q4_k, 512), 288u);
  EXPECT_EQ(ggml_bytes(GgmlType::q6_k, 256), 210u);
  EXPECT_EQ(ggml_bytes(GgmlType::q4_0, 64), 36u);
  EXPECT_THROW(ggml_bytes(GgmlType::q5_k, 100), Error);
  EXPECT_FALSE(ggml_type(7).has_value());  // q5_1: not read
  EXPECT_EQ(ggml_type(14), GgmlType::q6_k);
}

}  // namespace
}  // namespace tessera::interop
