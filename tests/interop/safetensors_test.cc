#include "tessera/interop/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "tessera/core/error.h"
#include "tests/expect_error.h"
#include "tests/interop/tensor_of.h"
#include "tests/test_dir.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::tensor_of;

// A file: the 8-byte little-endian length of `header`, the header, then `data`.
std::string file_of(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

SafetensorsHeader parse(const std::string& file) {
  return parse_safetensors(bytes_of(file), "test.safetensors");
}

void expect_parse_error(const std::string& file, std::initializer_list<std::string> parts) {
  expect_error([&] { parse(file); }, parts);
}

std::vector<float> read_all(const std::string& file, const std::string& name) {
  const SafetensorsHeader h = parse(file);
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.name != name) continue;
    std::vector<float> out(size_t(e.numel()));
    convert_to_f32(e, bytes_of(file).subspan(h.data_start), out, "test.safetensors");
    return out;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

template <typename T>
std::string raw(std::initializer_list<T> values) {
  std::string s(values.size() * sizeof(T), '\0');
  std::memcpy(s.data(), std::data(values), s.size());
  return s;
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::fresh_test_dir("tessera-st"); }
  void TearDown() override { fs::remove_all(dir_); }

  std::string read_bytes(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }

  fs::path dir_;
};

std::vector<float> iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (float(i) - float(n) / 3);
  return v;
}

TEST_F(SafetensorsFileTest, RoundTripsF32ExactlyWithMetadata) {
  const std::vector<float> a = iota(12, 0.37f), b = iota(5, -1.5f), c = iota(24, 1e-3f),
                           scalar = {42.5f}, empty;
  const fs::path path = dir_ / "model.safetensors";
  write_safetensors(
      path,
      {tensor_of("a", {3, 4}, a), tensor_of("b.bias", {5}, b), tensor_of("c", {2, 3, 4}, c),
       tensor_of("scalar", {}, scalar), tensor_of("empty", {0, 7}, empty)},
      DType::f32, {{"format", "pt"}});
  EXPECT_FALSE(fs::exists(path.string() + ".tmp"));

  const SafetensorsFile file(path);
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  EXPECT_EQ(file.header().metadata.size(), 2u);  // and the digests
  EXPECT_EQ(file.header().digests.size(), 5u);
  EXPECT_EQ(file.header().data_start % 8, 0u);
  ASSERT_EQ(file.header().tensors.size(), 5u);
  for (const auto& [name, values] : std::vector<std::pair<std::string, std::vector<float>>>{
           {"a", a}, {"b.bias", b}, {"c", c}, {"scalar", scalar}, {"empty", empty}}) {
    const SafetensorsEntry* e = file.find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->dtype, "F32");
    std::vector<float> got(size_t(e->numel()));
    file.read_f32(*e, got);
    EXPECT_EQ(got, values) << name;
  }
  EXPECT_EQ(file.find("c")->shape, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_TRUE(file.find("scalar")->shape.empty());
  EXPECT_EQ(file.find("nope"), nullptr);
  // Tensors follow each other in the order given, each aligned to its element size.
  EXPECT_EQ(file.find("a")->begin, 0u);
  EXPECT_EQ(file.find("b.bias")->begin, 48u);
  EXPECT_EQ(fs::file_size(path), file.header().data_start + (12 + 5 + 24 + 1) * 4);
}

TEST_F(SafetensorsFileTest, WritesBf16RoundedToNearestEven) {
  const std::vector<float> v = {1.0f, -3.0f, 1.00390625f, 1.01171875f, 3.14159265f, 1e-3f};
  const fs::path path = dir_ / "bf16.safetensors";
  write_safetensors(path, {tensor_of("w", {2, 3}, v)}, DType::bf16, {});
  const SafetensorsFile file(path);
  const SafetensorsEntry* e = file.find("w");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, "BF16");
  EXPECT_EQ(e->end - e->begin, 12u);
  EXPECT_EQ(file.header().metadata.size(), 1u);  // the digests only
  std::vector<float> got(6);
  file.read_f32(*e, got);
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i], bf16_to_f32(f32_to_bf16(v[i]))) << i;
  EXPECT_EQ(got[2], 1.0f);       // a tie rounds to the even neighbour
  EXPECT_EQ(got[3], 1.015625f);  // above the tie rounds up
}

TEST_F(SafetensorsFileTest, WriterRefusesOtherDtypesAndDuplicateNames) {
  const std::vector<float> v = {1, 2};
  expect_error([&] { write_safetensors(dir_ / "x", {tensor_of("w", {2}, v)}, DType::i32, {}); },
               {"x", "i32"});
  expect_error(
      [&] {
        write_safetensors(dir_ / "x", {tensor_of("w", {2}, v), tensor_of("w", {2}, v)}, DType::f32,
                          {});
      },
      {"'w'", "two"});
}

TEST_F(SafetensorsFileTest, MissingFileIsNamed) {
  expect_error([&] { SafetensorsFile f(dir_ / "absent.safetensors"); }, {"absent.safetensors"});
}

TEST(Safetensors, ReadsBf16F16AndF64) {
  const std::string data = raw<uint16_t>({0x3f80, 0xc040, 0x7f80, 0x0000}) +       // bf16
                           raw<uint16_t>({0x3c00, 0xc000, 0x7bff, 0x0001, 0x8400,  // f16
                                          0x7c00, 0xfc00, 0x3555}) +
                           raw<double>({0.1, -2.5});
  const std::string file = file_of(R"({"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},)"
                                   R"("h":{"dtype":"F16","shape":[8],"data_offsets":[8,24]},)"
                                   R"("d":{"dtype":"F64","shape":[2],"data_offsets":[24,40]}})",
                                   data);
  EXPECT_EQ(read_all(file, "b"),
            (std::vector<float>{1.0f, -3.0f, std::numeric_limits<float>::infinity(), 0.0f}));
  const std::vector<float> h = read_all(file, "h");
  ASSERT_EQ(h.size(), 8u);
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 65504.0f);                // the largest f16
  EXPECT_EQ(h[3], std::ldexp(1.0f, -24));   // the smallest subnormal
  EXPECT_EQ(h[4], -std::ldexp(1.0f, -14));  // the smallest normal, negative
  EXPECT_EQ(h[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[6], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[7], 0.333251953125f);
  EXPECT_EQ(read_all(file, "d"), (std::vector<float>{0.1f, -2.5f}));
}

TEST(Safetensors, AcceptsSpacePaddedHeadersAndFilesWithoutTensors) {
  const std::string file =
      file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})" + std::string(7, ' '),
              raw<float>({2.5f}));
  EXPECT_EQ(read_all(file, "w"), std::vector<float>{2.5f});
  const SafetensorsHeader empty = parse(file_of(R"({"__metadata__":{"k":"v"}})", ""));
  EXPECT_TRUE(empty.tensors.empty());
  EXPECT_EQ(empty.metadata.at("k"), "v");
}

TEST(Safetensors, KnownDtypesThatDoNotConvertAreNamed) {
  const std::string file =
      file_of(R"({"position_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})",
              raw<int64_t>({0, 1}));
  expect_error([&] { read_all(file, "position_ids"); },
               {"test.safetensors", "'position_ids'", "I64"});
}

TEST(Safetensors, RejectsTruncatedFilesAndBadHeaderLengths) {
  expect_parse_error("abc", {"test.safetensors", "too short"});
  std::string huge = file_of("{}", "");
  const uint64_t n = 1000;
  std::memcpy(huge.data(), &n, 8);
  expect_parse_error(huge, {"test.safetensors", "header length 1000", "past the end"});
  std::string all_ones = file_of("{}", "");
  std::memset(all_ones.data(), 0xff, 8);
  expect_parse_error(all_ones, {"header length 18446744073709551615"});
  expect_parse_error(file_of("", ""), {"not a JSON object"});
  expect_parse_error(file_of("[1, 2]", ""), {"not a JSON object"});
}

TEST(Safetensors, RejectsInvalidJson) {
  expect_parse_error(file_of(R"({"w":{"dtype":"F32",)", ""),
                     {"test.safetensors", "not valid JSON"});
  expect_parse_error(file_of("{\"w\"\n:\x01}", ""), {"not valid JSON"});
  expect_parse_error(file_of(R"({"w": 1} trailing)", ""), {"not valid JSON"});
}

TEST(Safetensors, RejectsBadEntries) {
  const std::string four(4, '\0');
  expect_parse_error(file_of(R"({"w":[1]})", four), {"'w'", "expected an object"});
  expect_parse_error(file_of(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", four),
                     {"'w'", "missing field 'dtype'"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", four),
                     {"'w'", "unknown or unsupported dtype 'F33'"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F4","shape":[8],"data_offsets":[0,4]}})", four),
                     {"'w'", "'F4'"});
  expect_parse_error(file_of(R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", four),
                     {"'w'", "dtype must be a string"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four),
                     {"'w'", "negative dimension"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", four),
                     {"'w'", "integers"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F32","shape":1,"data_offsets":[0,4]}})", four),
                     {"'w'", "shape must be an array"});
  expect_parse_error(
      file_of(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
              four),
      {"'w'", "too large"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", four),
                     {"'w'", "data_offsets"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", four),
                     {"'w'", "data_offsets"});
  expect_parse_error(file_of(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", four),
                     {"'w'", "end before they begin"});
  expect_parse_error(file_of(R"({"__metadata__":{"k":1}})", ""), {"__metadata__", "'k'"});
  expect_parse_error(file_of(R"({"__metadata__":[]})", ""), {"__metadata__"});
}

TEST(Safetensors, RejectsSizeMismatches) {
  expect_parse_error(
      file_of(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", std::string(8, 0)),
      {"test.safetensors", "'w'", "span 8 bytes", "[2,2] of F32 needs 16"});
  expect_parse_error(
      file_of(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,4]}})", std::string(4, 0)),
      {"'w'", "needs 6"});
}

TEST(Safetensors, RejectsOverlapsGapsAndOutOfRangeOffsets) {
  const std::string twelve(12, '\0');
  expect_parse_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                             twelve),
                     {"test.safetensors", "'b'", "overlaps tensor 'a'"});
  expect_parse_error(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                             std::string(8, 0)),
                     {"overlaps"});
  expect_parse_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                             twelve),
                     {"bytes [4, 8)", "no tensor", "'b'"});
  expect_parse_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", twelve),
                     {"bytes [4, 12)", "end of the data section"});
  expect_parse_error(file_of(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", twelve),
                     {"'a'", "past the end of the data section (12 bytes)"});
  expect_parse_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", twelve),
                     {"bytes [0, 4)", "'a'"});
}

TEST(Safetensors, RejectsDuplicateNamesAndKeys) {
  const std::string eight(8, '\0');
  expect_parse_error(file_of(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                             eight),
                     {"test.safetensors", "'a' twice"});
  expect_parse_error(
      file_of(R"({"a":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", eight),
      {"'dtype' twice"});
}

TEST(Safetensors, ZeroSizedTensorsMayShareAnOffset) {
  const SafetensorsHeader h =
      parse(file_of(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                    R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                    R"("c":{"dtype":"F16","shape":[0,3],"data_offsets":[4,4]}})",
                    std::string(4, '\0')));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "b");
}

TEST(Safetensors, NamesWithControlCharactersStayOnOneLine) {
  expect_parse_error(
      file_of("{\"a\\nb\":{\"dtype\":\"X\",\"shape\":[],\"data_offsets\":[0,0]}}", ""),
      {"a\\x0ab"});
}

}  // namespace
}  // namespace tessera::interop
