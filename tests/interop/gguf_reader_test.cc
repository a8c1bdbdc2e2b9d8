// Reading GGUF: a file the writer made reads back key by key and tensor by tensor, and a file
// damaged in any of the ways a reader must not trust (truncation, counts and lengths past the
// end, bad shapes, types, alignment and offsets) is refused with an error naming the problem.
#include "tessera/interop/gguf_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/interop/gguf_writer.h"
#include "tests/expect_error.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  const std::string text = s.str();
  return {text.begin(), text.end()};
}

// A GGUF file byte by byte, for files no writer would make.
class RawGguf {
 public:
  RawGguf(uint32_t version, uint64_t tensors, uint64_t keys) {
    bytes("GGUF", 4);
    scalar(version);
    scalar(tensors);
    scalar(keys);
  }
  template <typename T>
  RawGguf& scalar(T v) {
    return bytes(&v, sizeof v);
  }
  RawGguf& text(const std::string& s) {
    scalar(uint64_t(s.size()));
    return bytes(s.data(), s.size());
  }
  RawGguf& bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    data_.insert(data_.end(), b, b + n);
    return *this;
  }
  // A tensor's info: name, dims (ggml's order, innermost first), type, offset.
  RawGguf& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
                  uint64_t offset) {
    text(name);
    scalar(uint32_t(dims.size()));
    for (uint64_t d : dims) scalar(d);
    scalar(type);
    return scalar(offset);
  }
  // Pads to the 32-byte alignment and adds `n` bytes of data.
  RawGguf& data(size_t n) {
    data_.resize((data_.size() + 31) / 32 * 32 + n, 0);
    return *this;
  }
  std::span<const uint8_t> span() const { return data_; }

 private:
  std::vector<uint8_t> data_;
};

void expect_refused(const RawGguf& file, const std::string& message) {
  testing::expect_error([&] { parse_gguf(file.span(), "bad.gguf"); }, {"bad.gguf", message});
}

TEST(GgufReader, ReadsBackWhatTheWriterWrote) {
  const fs::path path = fs::temp_directory_path() / ("gguf-reader-" + std::to_string(getpid()));
  GgufWriter w;
  w.set("general.architecture", std::string("llama"));
  w.set("llama.block_count", uint32_t(3));
  w.set("llama.rope.freq_base", 5e5f);
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "bc"});
  w.set("tokenizer.ggml.token_type", std::vector<int32_t>{1, -3});
  w.set("tokenizer.ggml.add_bos_token", true);
  w.add_tensor("m", {2, 3}, GgmlType::f32,
               [](std::span<float> v) { std::iota(v.begin(), v.end(), 1.0f); });
  w.add_tensor("q", {1, 64}, GgmlType::q8_0, [](std::span<float> v) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 5) - 2;
  });
  w.write(path);
  const GgufFile f(path);
  fs::remove(path);
  EXPECT_EQ(f.header().version, 3u);
  EXPECT_EQ(f.text("general.architecture"), "llama");
  EXPECT_EQ(f.integer("llama.block_count"), 3);
  EXPECT_EQ(f.number("llama.rope.freq_base"), 5e5);
  EXPECT_EQ(f.number("llama.block_count"), 3.0);
  EXPECT_EQ(f.texts("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(f.integers("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, -3}));
  EXPECT_EQ(f.integer("tokenizer.ggml.add_bos_token"), 1);
  testing::expect_error([&] { f.integer("general.architecture"); },
                        {"general.architecture", "is not an integer"});
  testing::expect_error([&] { f.text("missing.key"); }, {"has no metadata key 'missing.key'"});
  ASSERT_EQ(f.header().tensors.size(), 2u);
  const GgufTensor* m = f.find("m");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(f.read(*m), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const std::vector<float> q = f.read(*f.find("q"));
  // q8_0: each block's scale is 2 / 127 in f16.
  for (size_t i = 0; i < q.size(); ++i) EXPECT_NEAR(q[i], float(i % 5) - 2, 1e-2) << i;
  EXPECT_EQ(f.find("nothing"), nullptr);
}

// Every cut before the last tensor's end is refused, never read past.
TEST(GgufReader, RefusesEveryTruncation) {
  const fs::path path = fs::temp_directory_path() / ("gguf-cut-" + std::to_string(getpid()));
  GgufWriter w;
  w.set("general.name", std::string("cut"));
  w.set("tokenizer.ggml.merges", std::vector<std::string>{"a b", "ab c"});
  w.add_tensor("t", {4, 32}, GgmlType::q8_0, [](std::span<float> v) { v[0] = 1; });
  w.add_tensor("u", {3}, GgmlType::f16, [](std::span<float> v) { v[1] = 2; });
  w.write(path);
  const std::vector<uint8_t> whole = file_bytes(path);
  fs::remove(path);
  const GgufHeader h = parse_gguf(whole, "whole.gguf");
  const uint64_t end = h.data_start + h.tensors.back().offset + h.tensors.back().bytes;
  for (size_t n = 0; n < end; ++n) {
    EXPECT_THROW(parse_gguf(std::span(whole).first(n), "cut.gguf"), Error) << n << " bytes";
  }
}

TEST(GgufReader, RefusesDamageByName) {
  expect_refused(RawGguf(1, 0, 0), "GGUF version 1; Tessera reads versions 2 and 3");
  std::vector<uint8_t> magic = {'G', 'G', 'U', 'X', 3, 0, 0, 0};
  testing::expect_error([&] { parse_gguf(magic, "bad.gguf"); }, {"not a GGUF file"});
  expect_refused(RawGguf(3, uint64_t(1) << 40, 0), "tensors, more than the file can hold");
  expect_refused(RawGguf(3, 0, uint64_t(1) << 40), "metadata keys, more than the file can hold");
  expect_refused(RawGguf(3, 0, 1).text("k").scalar(uint32_t(8)).scalar(uint64_t(1) << 50),
                 "past the end of the file");
  expect_refused(RawGguf(3, 0, 1).text("k").scalar(uint32_t(77)), "value type 77");
  expect_refused(
      RawGguf(3, 0, 1).text("k").scalar(uint32_t(9)).scalar(uint32_t(4)).scalar(uint64_t(1) << 40),
      "claims 1099511627776 elements");
  expect_refused(RawGguf(3, 0, 1).text("k").scalar(uint32_t(9)).scalar(uint32_t(9)),
                 "an array of arrays");
  expect_refused(RawGguf(3, 0, 2)
                     .text("k")
                     .scalar(uint32_t(4))
                     .scalar(uint32_t(1))
                     .text("k")
                     .scalar(uint32_t(4))
                     .scalar(uint32_t(2)),
                 "metadata key 'k' appears twice");
  expect_refused(RawGguf(3, 1, 0).tensor("t", {1, 1, 1, 1, 1}, 0, 0).data(4),
                 "tensor 't' has 5 dimensions");
  expect_refused(RawGguf(3, 1, 0).tensor("t", {4, 0}, 0, 0).data(4),
                 "tensor 't' has dimension 1 of 0 values");
  expect_refused(RawGguf(3, 1, 0).tensor("t", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 0),
                 "out of range");
  expect_refused(RawGguf(3, 1, 0).tensor("t", {4}, 99, 0).data(16), "ggml type 99");
  expect_refused(RawGguf(3, 1, 0).tensor("t", {48}, 8, 0).data(64),
                 "rows of 48 values, not a whole number of Q8_0 blocks of 32");
  expect_refused(RawGguf(3, 1, 0).tensor("t", {4}, 0, 4).data(64),
                 "not a multiple of the alignment");
  expect_refused(RawGguf(3, 1, 0).tensor("t", {64}, 0, 0).data(16), "ends past the file's");
  expect_refused(RawGguf(3, 2, 0).tensor("t", {4}, 0, 0).tensor("t", {4}, 0, 32).data(64),
                 "tensor 't' appears twice");
  expect_refused(RawGguf(3, 2, 0).tensor("t", {16}, 0, 0).tensor("u", {16}, 0, 32).data(96),
                 "tensors 't' and 'u' overlap");
  expect_refused(RawGguf(3, 0, 1).text("general.alignment").scalar(uint32_t(4)).scalar(uint32_t(3)),
                 "general.alignment must be a power of two");
}

}  // namespace
}  // namespace tessera::interop
