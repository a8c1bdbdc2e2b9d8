#include "tessera/ckpt/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>

#include "tessera/core/arena.h"
#include "tessera/core/checksum.h"
#include "tessera/core/text_corpus.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;

// The names in `dir`, sorted.
std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

#define EXPECT_ERROR_MENTIONS(message, ...)                                       \
  do {                                                                            \
    const std::string m = (message);                                              \
    for (const char* part : {__VA_ARGS__}) {                                      \
      EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' in: " << m; \
    }                                                                             \
    EXPECT_EQ(m.find('\n'), std::string::npos) << "not one line: " << m;          \
  } while (0)

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { run_ = testing::fresh_test_dir("tessera-ckpt"); }
  void TearDown() override { fs::remove_all(run_); }

  // Three tensors of every dtype, filled with values that depend on `seed`.
  std::vector<NamedTensor> make_tensors(Arena& arena, int seed) {
    Tensor w = arena.allocate({3, 5}, DType::f32);
    Tensor ids = arena.allocate({7}, DType::i32);
    Tensor h = arena.allocate({2, 2, 3}, DType::bf16);
    for (int i = 0; i < w.numel(); ++i) w.as<float>()[i] = 0.25f * i + seed;
    for (int i = 0; i < ids.numel(); ++i) ids.as<int32_t>()[i] = -3 * i + seed;
    for (int i = 0; i < h.numel(); ++i) h.as<uint16_t>()[i] = f32_to_bf16(1.5f * i - seed);
    return {{"blocks.0.fc.weight", w}, {"tokens", ids}, {"blocks.0.ln.h", h}};
  }

  // Views of the same shapes and dtypes, zeroed.
  static std::vector<NamedTensor> like(Arena& arena, const std::vector<NamedTensor>& src) {
    std::vector<NamedTensor> out;
    for (const NamedTensor& t : src) {
      out.push_back({t.name, arena.allocate(t.tensor.shape, t.tensor.dtype)});
    }
    return out;
  }

  static void expect_same_bytes(const std::vector<NamedTensor>& a,
                                const std::vector<NamedTensor>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_EQ(a[i].tensor.nbytes(), b[i].tensor.nbytes());
      EXPECT_EQ(std::memcmp(a[i].tensor.data, b[i].tensor.data, a[i].tensor.nbytes()), 0)
          << a[i].name;
    }
  }

  fs::path save_step(int64_t step, int keep_last = 0) {
    Arena arena(1 << 16);
    return save(run_, step, make_tensors(arena, static_cast<int>(step)), json{{"step", step}},
                keep_last);
  }

  bool has_hidden_entries() const {
    for (const auto& e : fs::directory_iterator(run_)) {
      if (e.path().filename().string().starts_with(".")) return true;
    }
    return false;
  }

  fs::path run_;
};

TEST_F(CheckpointTest, RoundTripsTensorsAndMetadata) {
  Arena arena(1 << 16);
  std::vector<NamedTensor> saved = make_tensors(arena, 7);
  json metadata = {{"config", {{"lr", 3e-4}, {"model", "gpt2"}}}, {"loader", {1, 2, 3}}};
  fs::path dir = save(run_, 42, saved, metadata, 3);

  EXPECT_EQ(dir, run_ / "step-000042");
  EXPECT_TRUE(fs::is_regular_file(dir / "COMMIT"));
  EXPECT_TRUE(fs::is_regular_file(dir / "rank-00000.bin"));
  EXPECT_FALSE(has_hidden_entries());

  Manifest m = read_manifest(dir);
  EXPECT_EQ(m.step, 42);
  EXPECT_EQ(m.metadata, metadata);
  ASSERT_EQ(m.tensors.size(), 3u);
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    EXPECT_EQ(m.tensors[i].name, saved[i].name);
    EXPECT_EQ(m.tensors[i].shape, saved[i].tensor.shape);
    EXPECT_EQ(m.tensors[i].dtype, saved[i].tensor.dtype);
    EXPECT_EQ(m.tensors[i].file, "rank-00000.bin");
    EXPECT_EQ(m.tensors[i].offset % 64, 0u);
    EXPECT_EQ(m.tensors[i].nbytes, saved[i].tensor.nbytes());
    EXPECT_EQ(m.tensors[i].crc32, crc32(saved[i].tensor.data, saved[i].tensor.nbytes()));
  }
  json raw = json::parse(read_text_file(dir / "manifest.json"));
  EXPECT_EQ(raw["format"], "tessera-checkpoint");
  EXPECT_EQ(raw["version"], 2);
  EXPECT_EQ(raw["world_size"], 1);

  // Load in a different order from the save: matching is by name.
  std::vector<NamedTensor> loaded = like(arena, saved);
  std::reverse(loaded.begin(), loaded.end());
  load(dir, loaded);
  std::reverse(loaded.begin(), loaded.end());
  expect_same_bytes(saved, loaded);
}

TEST_F(CheckpointTest, RoundTripsATensorLargerThanOneIoChunk) {
  Arena arena(size_t{81} << 20);
  Tensor big = arena.allocate({5, 1 << 20, 2}, DType::f32);  // 40 MiB
  for (int64_t i = 0; i < big.numel(); ++i) big.as<float>()[i] = static_cast<float>(i % 9973);
  Tensor tiny = arena.allocate({3}, DType::bf16);
  std::vector<NamedTensor> saved = {{"tiny", tiny}, {"big", big}};
  fs::path dir = save(run_, 1, saved, json::object(), 1);
  std::vector<NamedTensor> loaded = like(arena, saved);
  load(dir, loaded);
  expect_same_bytes(saved, loaded);
}

// A background save writes the image it took of the tensors: the same file, byte for byte, and
// the same listing as saving the tensors themselves.
TEST_F(CheckpointTest, AnImageOfTheTensorsSavesTheSameFile) {
  Arena arena(size_t{4} << 20);
  std::vector<NamedTensor> first = make_tensors(arena, 3);
  Tensor big = arena.allocate({(size_t{1} << 20) / 4 + 3}, DType::f32);  // not a whole page
  for (int64_t i = 0; i < big.numel(); ++i) big.as<float>()[i] = float(i % 1009) - 0.5f;
  std::vector<NamedTensor> second = {{"odd", make_tensors(arena, 5)[1].tensor}, {"big", big}};

  DataImage image;
  image.reserve(first);
  for (const std::vector<NamedTensor>* tensors : {&first, &second}) {
    // Filled again with another layout, the image must hold none of the earlier bytes.
    image.fill(*tensors);
    const fs::path streamed = save(run_ / "streamed", 1, *tensors, json{}, 0);
    const fs::path imaged = save(run_ / "imaged", 1, image, json{}, 0);
    EXPECT_EQ(read_text_file(imaged / "rank-00000.bin"),
              read_text_file(streamed / "rank-00000.bin"));
    EXPECT_EQ(read_text_file(imaged / "manifest.json"), read_text_file(streamed / "manifest.json"));
    Arena back(size_t{4} << 20);
    std::vector<NamedTensor> loaded = like(back, *tensors);
    load(imaged, loaded);
    expect_same_bytes(loaded, *tensors);
  }
}

TEST_F(CheckpointTest, AnImageWithTwoTensorsOfOneNameIsRefused) {
  Arena arena(1 << 16);
  std::vector<NamedTensor> tensors = make_tensors(arena, 1);
  tensors[2].name = tensors[0].name;
  DataImage image;
  image.fill(tensors);
  EXPECT_ERROR_MENTIONS(error_of([&] { save(run_, 1, image, json{}, 0); }),
                        "cannot save two tensors named 'blocks.0.fc.weight'");
  EXPECT_FALSE(find_latest(run_));
}

TEST_F(CheckpointTest, LatestPointsToTheNewestSave) {
  save_step(1);
  save_step(2);
  fs::path third = save_step(3);
  EXPECT_EQ(read_text_file(run_ / "latest"), "step-000003\n");
  EXPECT_EQ(resolve(run_), third);
  EXPECT_FALSE(fs::exists(run_ / "latest.tmp"));
}

TEST_F(CheckpointTest, KeepLastPrunesTheOldestSteps) {
  for (int step = 1; step <= 5; ++step) save_step(step * 100, 2);
  EXPECT_EQ(entries_of(run_), (std::vector<std::string>{"latest", "step-000400", "step-000500"}));
}

TEST_F(CheckpointTest, KeepLastNeverDeletesTheStepJustWritten) {
  save_step(10);
  save_step(20);
  fs::path rewound = save_step(5, 2);  // e.g. a run restarted from an earlier step
  EXPECT_TRUE(fs::exists(rewound));
  EXPECT_FALSE(fs::exists(run_ / "step-000010"));
  EXPECT_TRUE(fs::exists(run_ / "step-000020"));
  EXPECT_EQ(resolve(run_), rewound);
}

TEST_F(CheckpointTest, SavingAnExistingStepReplacesIt) {
  Arena arena(1 << 16);
  save(run_, 9, make_tensors(arena, 1), json{{"try", 1}}, 0);
  std::vector<NamedTensor> second = make_tensors(arena, 2);
  fs::path dir = save(run_, 9, second, json{{"try", 2}}, 0);
  EXPECT_EQ(read_manifest(dir).metadata, (json{{"try", 2}}));
  std::vector<NamedTensor> loaded = like(arena, second);
  load(dir, loaded);
  expect_same_bytes(second, loaded);
  EXPECT_FALSE(has_hidden_entries());
}

TEST_F(CheckpointTest, ResolvesARunDirectoryWithoutLatest) {
  save_step(1);
  fs::path newest = save_step(12);
  save_step(3);  // written last, but not the highest step
  fs::remove(run_ / "latest");
  EXPECT_EQ(resolve(run_), newest);
  EXPECT_EQ(resolve(newest), newest);
}

TEST_F(CheckpointTest, FindLatestIsEmptyForAFreshRun) {
  EXPECT_EQ(find_latest(run_), std::nullopt);
  fs::create_directories(run_ / "step-000001");  // never committed
  EXPECT_EQ(find_latest(run_), std::nullopt);
  fs::path dir = save_step(2);
  EXPECT_EQ(find_latest(run_), dir);
}

TEST_F(CheckpointTest, ResolveIgnoresAnUncommittedNewerStep) {
  save_step(1);
  fs::path good = save_step(2);
  fs::path partial = run_ / "step-000003";
  fs::copy(good, partial);
  fs::remove(partial / "COMMIT");
  write_text_file(run_ / "latest", "step-000003\n");
  EXPECT_EQ(resolve(run_), good);
}

TEST_F(CheckpointTest, NamingAnUncommittedStepIsAnError) {
  fs::path dir = save_step(4);
  fs::remove(dir / "COMMIT");
  EXPECT_ERROR_MENTIONS(error_of([&] { resolve(dir); }), "step-000004",
                        "checkpoint is incomplete (no COMMIT marker)");
  Arena arena(1 << 16);
  std::vector<NamedTensor> dst = like(arena, make_tensors(arena, 0));
  EXPECT_ERROR_MENTIONS(error_of([&] { load(dir, dst); }), "step-000004", "no COMMIT marker");
  EXPECT_ERROR_MENTIONS(error_of([&] { resolve(run_); }), "no committed checkpoint");
}

TEST_F(CheckpointTest, AFlippedByteFailsTheChecksum) {
  fs::path dir = save_step(1);
  Manifest m = read_manifest(dir);
  const Manifest::Entry& victim = m.tensors[1];
  {
    std::fstream f(dir / "rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(victim.offset + 3));
    char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(victim.offset + 3));
    f.put(static_cast<char>(c ^ 0x10));
  }
  Arena arena(1 << 16);
  std::vector<NamedTensor> dst = like(arena, make_tensors(arena, 0));
  EXPECT_ERROR_MENTIONS(error_of([&] { load(dir, dst); }), "rank-00000.bin", "checksum mismatch",
                        "'tokens'", "corrupted");
  // Tensors whose bytes are intact still load.
  EXPECT_NO_THROW(load(dir, {dst[0], dst[2]}));
}

TEST_F(CheckpointTest, ATruncatedDataFileIsAnError) {
  fs::path dir = save_step(1);
  fs::resize_file(dir / "rank-00000.bin", read_manifest(dir).tensors.back().offset + 2);
  Arena arena(1 << 16);
  std::vector<NamedTensor> dst = like(arena, make_tensors(arena, 0));
  EXPECT_ERROR_MENTIONS(error_of([&] { load(dir, dst); }), "rank-00000.bin", "truncated",
                        "'blocks.0.ln.h'");
}

TEST_F(CheckpointTest, AMissingDataFileIsAnError) {
  fs::path dir = save_step(1);
  fs::remove(dir / "rank-00000.bin");
  Arena arena(1 << 16);
  std::vector<NamedTensor> dst = like(arena, make_tensors(arena, 0));
  EXPECT_ERROR_MENTIONS(error_of([&] { load(dir, dst); }), "rank-00000.bin", "cannot open");
}

TEST_F(CheckpointTest, AMissingTensorNameIsAnError) {
  fs::path dir = save_step(1);
  Arena arena(1 << 16);
  std::vector<NamedTensor> dst = {{"blocks.9.attn.qkv", arena.allocate({2}, DType::f32)}};
  EXPECT_ERROR_MENTIONS(error_of([&] { load(dir, dst); }), "manifest.json", "'blocks.9.attn.qkv'");
}

TEST_F(CheckpointTest, AShapeOrDtypeMismatchIsAnError) {
  fs::path dir = save_step(1);
  Arena arena(1 << 16);
  std::vector<NamedTensor> wrong_shape = {
      {"blocks.0.fc.weight", arena.allocate({5, 3}, DType::f32)}};
  EXPECT_ERROR_MENTIONS(error_of([&] { load(dir, wrong_shape); }), "manifest.json",
                        "'blocks.0.fc.weight'", "[3, 5]", "[5, 3]");
  std::vector<NamedTensor> wrong_dtype = {{"tokens", arena.allocate({7}, DType::f32)}};
  EXPECT_ERROR_MENTIONS(error_of([&] { load(dir, wrong_dtype); }), "'tokens'", "i32", "f32");
}

TEST_F(CheckpointTest, ALeftoverTmpDirFromACrashIsIgnoredAndCleanedUp) {
  fs::path good = save_step(1);
  // A save of step 2 that died after writing COMMIT but before the rename.
  fs::path crashed = run_ / ".step-000002.tmp";
  fs::copy(good, crashed);
  write_text_file(run_ / "latest.tmp", "step-000002\n");
  EXPECT_EQ(resolve(run_), good);
  fs::remove(run_ / "latest");
  EXPECT_EQ(resolve(run_), good);

  save_step(3);
  EXPECT_FALSE(fs::exists(crashed));
  EXPECT_FALSE(fs::exists(run_ / "latest.tmp"));
  EXPECT_FALSE(has_hidden_entries());
}

TEST_F(CheckpointTest, RejectsInvalidSaves) {
  Arena arena(1 << 16);
  std::vector<NamedTensor> t = make_tensors(arena, 0);
  t[2].name = t[0].name;
  EXPECT_ERROR_MENTIONS(error_of([&] { save(run_, 1, t, json{}, 0); }), "two tensors",
                        "'blocks.0.fc.weight'");
  EXPECT_ERROR_MENTIONS(error_of([&] { save(run_, -1, std::vector<NamedTensor>{}, json{}, 0); }),
                        "negative step");
}

TEST_F(CheckpointTest, PartsWrittenSeparatelyLoadAsOneCheckpoint) {
  Arena arena(1 << 16);
  std::vector<NamedTensor> saved = make_tensors(arena, 5);
  fs::path tmp = begin_save(run_, 8);
  for (int part = 2; part >= 0; --part) write_part(tmp, part, {saved[part]});  // any order
  json metadata = {{"world", 3}};
  fs::path dir = commit_save(run_, 8, 3, metadata, 0);

  EXPECT_EQ(dir, run_ / "step-000008");
  EXPECT_EQ(entries_of(dir), (std::vector<std::string>{"COMMIT", "manifest.json", "rank-00000.bin",
                                                       "rank-00001.bin", "rank-00002.bin"}));
  EXPECT_FALSE(has_hidden_entries());
  EXPECT_EQ(resolve(run_), dir);
  Manifest m = read_manifest(dir);
  EXPECT_EQ(m.step, 8);
  EXPECT_EQ(m.metadata, metadata);
  ASSERT_EQ(m.tensors.size(), 3u);
  for (int part = 0; part < 3; ++part) {
    EXPECT_EQ(m.tensors[part].name, saved[part].name);
    EXPECT_EQ(m.tensors[part].file, fmt::format("rank-{:05d}.bin", part));
  }

  std::vector<NamedTensor> loaded = like(arena, saved);
  load(dir, loaded);
  expect_same_bytes(saved, loaded);
}

TEST_F(CheckpointTest, AMissingPartCommitsNothing) {
  fs::path good = save_step(1);
  Arena arena(1 << 16);
  std::vector<NamedTensor> t = make_tensors(arena, 2);
  fs::path tmp = begin_save(run_, 2);
  write_part(tmp, 0, {t[0]});
  write_part(tmp, 1, {t[1], t[2]});
  EXPECT_ERROR_MENTIONS(error_of([&] { commit_save(run_, 2, 3, json{}, 1); }), "rank-00002.json",
                        "rank 2 did not write its part");
  EXPECT_FALSE(fs::exists(run_ / "step-000002"));
  EXPECT_EQ(read_text_file(run_ / "latest"), "step-000001\n");
  EXPECT_EQ(resolve(run_), good);
  EXPECT_EQ(find_latest(run_), good);
}

TEST_F(CheckpointTest, ATensorNameInTwoPartsIsAnError) {
  Arena arena(1 << 16);
  std::vector<NamedTensor> t = make_tensors(arena, 0);
  fs::path tmp = begin_save(run_, 1);
  write_part(tmp, 0, {t[0], t[1]});
  write_part(tmp, 1, {t[2], t[1]});
  EXPECT_ERROR_MENTIONS(error_of([&] { commit_save(run_, 1, 2, json{}, 0); }), "'tokens'",
                        "rank-00000", "rank-00001");
  EXPECT_EQ(find_latest(run_), std::nullopt);
}

TEST(Checksum, MatchesTheStandardCrc32AndContinuesAcrossPieces) {
  const char* text = "123456789";
  EXPECT_EQ(crc32(text, 9), 0xCBF43926u);
  EXPECT_EQ(crc32(text + 4, 5, crc32(text, 4)), 0xCBF43926u);
  EXPECT_EQ(crc32(text, 0), 0u);

  // Large buffers are checksummed in parallel pieces; the result must not depend on that.
  std::vector<uint8_t> big((size_t{20} << 20) + 13);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  uint32_t piecewise = 7;
  for (size_t at = 0; at < big.size(); at += 100000) {
    piecewise = crc32(big.data() + at, std::min<size_t>(100000, big.size() - at), piecewise);
  }
  EXPECT_EQ(crc32(big.data(), big.size(), 7), piecewise);
}

}  // namespace
}  // namespace tessera::ckpt
