// A safetensors file Tessera exports carries each tensor's crc32 in its metadata; a byte changed
// in a tensor's data afterwards is refused on import, naming the file and the tensor. Files
// without digests, as other tools write them, read as before.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/checksum.h"
#include "tessera/interop/safetensors.h"
#include "tests/expect_error.h"
#include "tests/interop/tensor_of.h"
#include "tests/test_dir.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::tensor_of;

const std::vector<float> kA = {1.5f, -2.0f, 0.25f, 8.0f, 3.0f, -0.5f};
const std::vector<float> kB = {7.0f, 9.0f, -1.0f};

// The header as JSON and the data section of a file.
struct Parts {
  nlohmann::json header;
  std::string data;
};

Parts split(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), {}};
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  return {nlohmann::json::parse(bytes.substr(8, n)), bytes.substr(8 + n)};
}

void join(const fs::path& path, const Parts& parts) {
  const std::string header = parts.header.dump();
  const uint64_t n = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << header << parts.data;
}

class SafetensorsDigests : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::fresh_test_dir("tessera-st-digests"); }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path write(DType dtype) {
    const fs::path path = dir_ / "model.safetensors";
    write_safetensors(path, {tensor_of("a", {2, 3}, kA), tensor_of("b", {3}, kB)}, dtype,
                      {{"format", "pt"}});
    return path;
  }

  // Reads every tensor of the file, the error of the first that fails, if any.
  static void read_all(const fs::path& path) {
    const SafetensorsFile file(path);
    for (const SafetensorsEntry& e : file.header().tensors) {
      std::vector<float> out(size_t(e.numel()));
      file.read_f32(e, out);
    }
  }

  // Flips one bit of the byte `at` bytes into tensor `name`'s data.
  static void flip(const fs::path& path, const std::string& name, uint64_t at) {
    const SafetensorsFile file(path);
    const uint64_t offset = file.header().data_start + file.find(name)->begin + at;
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(offset));
    const char c = char(f.get());
    f.seekp(std::streamoff(offset));
    f.put(char(c ^ 0x01));
  }

  fs::path dir_;
};

TEST_F(SafetensorsDigests, TheWriterRecordsEachTensorsCrc32) {
  const fs::path path = write(DType::f32);
  const SafetensorsFile file(path);
  const auto digests = nlohmann::json::parse(file.header().metadata.at(kSafetensorsDigestsKey));
  EXPECT_EQ(digests.at("a"), fmt::format("{:08x}", crc32(kA.data(), kA.size() * sizeof(float))));
  EXPECT_EQ(file.header().digests.at("b"), crc32(kB.data(), kB.size() * sizeof(float)));
  EXPECT_NO_THROW(read_all(path));
}

TEST_F(SafetensorsDigests, AFlippedDataByteIsRefusedNamingTheFileAndTensor) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    const fs::path path = write(dtype);
    flip(path, "b", 1);
    expect_error([&] { read_all(path); },
                 {path.string() + ": checksum mismatch for tensor 'b'", "corrupted"});
    // The intact tensor still reads.
    const SafetensorsFile file(path);
    std::vector<float> a(kA.size());
    file.read_f32(*file.find("a"), a);
    if (dtype == DType::f32) {
      EXPECT_EQ(a, kA);
    }
  }
}

TEST_F(SafetensorsDigests, AFileWithoutDigestsStillReads) {
  const fs::path path = write(DType::f32);
  Parts parts = split(path);
  parts.header["__metadata__"].erase(kSafetensorsDigestsKey);
  join(path, parts);
  flip(path, "b", 0);  // unnoticed without digests, as in any other tool's file
  const SafetensorsFile file(path);
  EXPECT_TRUE(file.header().digests.empty());
  std::vector<float> a(kA.size());
  file.read_f32(*file.find("a"), a);
  EXPECT_EQ(a, kA);
  EXPECT_NO_THROW(read_all(path));
}

TEST_F(SafetensorsDigests, DigestsThatDoNotFitTheFileAreRefused) {
  const fs::path path = write(DType::f32);
  const Parts good = split(path);
  const nlohmann::json digests =
      nlohmann::json::parse(good.header["__metadata__"][kSafetensorsDigestsKey].get<std::string>());
  const std::string name = path.string();
  const auto with_digests = [&](const std::string& text) {
    Parts parts = good;
    parts.header["__metadata__"][kSafetensorsDigestsKey] = text;
    join(path, parts);
  };
  nlohmann::json missing = digests;
  missing.erase("b");
  with_digests(missing.dump());
  expect_error([&] { SafetensorsFile f(path); }, {name, "no digest for tensor 'b'"});
  nlohmann::json extra = digests;
  extra["c"] = "00000000";
  with_digests(extra.dump());
  expect_error([&] { SafetensorsFile f(path); }, {name, "tensor 'c'", "does not hold"});
  nlohmann::json number = digests;
  number["a"] = 12345678;
  with_digests(number.dump());
  expect_error([&] { SafetensorsFile f(path); }, {name, "digest of tensor 'a'", "8 hex digits"});
  with_digests("{not json");
  expect_error([&] { SafetensorsFile f(path); }, {name, "tessera.crc32", "not valid JSON"});
}

TEST_F(SafetensorsDigests, TheWriterKeepsItsDigestKeyToItself) {
  expect_error(
      [&] {
        write_safetensors(dir_ / "x.safetensors", {tensor_of("b", {3}, kB)}, DType::f32,
                          {{kSafetensorsDigestsKey, "{}"}});
      },
      {"x.safetensors", kSafetensorsDigestsKey});
}

}  // namespace
}  // namespace tessera::interop
