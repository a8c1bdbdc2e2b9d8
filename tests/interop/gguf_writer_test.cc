// The GGUF container and its encodings: f16 conversion and the file's layout read back byte by
// byte (llama.cpp itself reads exported models in tests/e2e/gguf_llama_cpp_test.cc; q8_0 blocks:
// tests/core/q8_0_test.cc).
#include "tessera/interop/gguf_writer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;

TEST(F16, EveryHalfSurvivesARoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f)))) << h;
      continue;
    }
    ASSERT_EQ(f32_to_f16(f), h) << h;
  }
}

TEST(F16, RoundsToNearestEvenAndOverflowsToInfinity) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(1.0f + 0.5f / 1024), 0x3c00);  // a tie goes to the even mantissa
  EXPECT_EQ(f32_to_f16(1.0f + 1.5f / 1024), 0x3c02);
  EXPECT_EQ(f32_to_f16(1.0f + 0.51f / 1024), 0x3c01);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e9f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

// A little-endian reader over the file's bytes.
class Bytes {
 public:
  explicit Bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    data_ = s.str();
  }
  template <typename T>
  T scalar() {
    T v;
    std::memcpy(&v, data_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string() {
    const uint64_t n = scalar<uint64_t>();
    std::string s = data_.substr(at_, n);
    at_ += n;
    return s;
  }
  size_t at() const { return at_; }
  void seek(size_t at) { at_ = at; }
  size_t size() const { return data_.size(); }

 private:
  std::string data_;
  size_t at_ = 0;
};

TEST(GgufWriter, WritesHeaderMetadataTensorInfosAndAlignedData) {
  const fs::path path = fs::temp_directory_path() / ("gguf-writer-" + std::to_string(getpid()));
  GgufWriter w;
  w.set("general.architecture", std::string("llama"));
  w.set("llama.block_count", uint32_t(2));
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "bc"});
  w.set("tokenizer.ggml.token_type", std::vector<int32_t>{1, 3});
  w.add_tensor("m", {3, 32}, GgmlType::q8_0, [](std::span<float> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = float(i);
  });
  w.add_tensor("v", {5}, GgmlType::f32, [](std::span<float> out) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = 0.5f * float(i);
  });
  EXPECT_THROW(w.set("llama.block_count", uint32_t(3)), Error);
  EXPECT_THROW(w.add_tensor("odd", {2, 30}, GgmlType::q8_0, [](std::span<float>) {}), Error);
  w.write(path);

  Bytes b(path);
  EXPECT_EQ(b.scalar<uint32_t>(), 0x46554747u);  // "GGUF"
  EXPECT_EQ(b.scalar<uint32_t>(), 3u);
  EXPECT_EQ(b.scalar<uint64_t>(), 2u);
  EXPECT_EQ(b.scalar<uint64_t>(), 4u);
  EXPECT_EQ(b.string(), "general.architecture");
  EXPECT_EQ(b.scalar<uint32_t>(), 8u);
  EXPECT_EQ(b.string(), "llama");
  EXPECT_EQ(b.string(), "llama.block_count");
  EXPECT_EQ(b.scalar<uint32_t>(), 4u);
  EXPECT_EQ(b.scalar<uint32_t>(), 2u);
  EXPECT_EQ(b.string(), "tokenizer.ggml.tokens");
  EXPECT_EQ(b.scalar<uint32_t>(), 9u);
  EXPECT_EQ(b.scalar<uint32_t>(), 8u);
  EXPECT_EQ(b.scalar<uint64_t>(), 2u);
  EXPECT_EQ(b.string(), "a");
  EXPECT_EQ(b.string(), "bc");
  EXPECT_EQ(b.string(), "tokenizer.ggml.token_type");
  EXPECT_EQ(b.scalar<uint32_t>(), 9u);
  EXPECT_EQ(b.scalar<uint32_t>(), 5u);
  EXPECT_EQ(b.scalar<uint64_t>(), 2u);
  EXPECT_EQ(b.scalar<int32_t>(), 1);
  EXPECT_EQ(b.scalar<int32_t>(), 3);
  // Tensor infos: ggml's dimension order (innermost first), type, offset in the data section.
  EXPECT_EQ(b.string(), "m");
  EXPECT_EQ(b.scalar<uint32_t>(), 2u);
  EXPECT_EQ(b.scalar<uint64_t>(), 32u);
  EXPECT_EQ(b.scalar<uint64_t>(), 3u);
  EXPECT_EQ(b.scalar<uint32_t>(), 8u);
  EXPECT_EQ(b.scalar<uint64_t>(), 0u);
  EXPECT_EQ(b.string(), "v");
  EXPECT_EQ(b.scalar<uint32_t>(), 1u);
  EXPECT_EQ(b.scalar<uint64_t>(), 5u);
  EXPECT_EQ(b.scalar<uint32_t>(), 0u);
  const uint64_t v_offset = b.scalar<uint64_t>();
  EXPECT_EQ(v_offset, 128u);  // 3 blocks of 34 bytes, aligned up to 32
  const size_t data_start = (b.at() + 31) / 32 * 32;
  b.seek(data_start + 2 + 1);
  EXPECT_EQ(b.scalar<int8_t>(), int8_t(std::round(1.0f / (31.0f / 127.0f))));
  b.seek(data_start + v_offset + 4 * sizeof(float));
  EXPECT_EQ(b.scalar<float>(), 2.0f);
  EXPECT_EQ(b.size(), data_start + v_offset + 32);
  fs::remove(path);
}

}  // namespace
}  // namespace tessera::interop
