#include "tessera/data/prepare.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/data/dataset.h"
#include "tessera/tokenizer/byte_tokenizer.h"
#include "tests/data/byte_special_tokenizer.h"

namespace fs = std::filesystem;

namespace tessera::data {
namespace {

std::vector<int32_t> all_tokens(const TokenStream& s) {
  std::vector<int32_t> out(s.size());
  s.copy(0, s.size(), out.data());
  return out;
}

std::string text_of(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) s += t == 256 ? '|' : char(t);
  return s;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera_prepare_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "in");
  }
  void TearDown() override { fs::remove_all(root_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(root_ / "in" / name, std::ios::binary) << text;
  }
  PrepareOptions options(const std::string& out, double val_fraction = 0.25) {
    PrepareOptions o;
    o.inputs = {root_ / "in"};
    o.out_dir = root_ / out;
    o.val_fraction = val_fraction;
    return o;
  }
  std::string error_of(const tokenizer::Tokenizer& t, const PrepareOptions& o) {
    try {
      prepare_dataset(t, "test", o);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path root_;
};

TEST_F(PrepareTest, FilesAreDocumentsSeparatedByEndOfTextAndTheTailIsHeldOut) {
  write("a.txt", "alpha one\nalpha two\n");
  write("b.txt", "bravo\n");
  write("c.txt", "");  // skipped, no empty document
  write("d.txt", "delta one\ndelta two\ndelta three\n");
  const DatasetManifest m = prepare_dataset(testing::ByteSpecialTokenizer(), "test", options("ds"));
  const Dataset d = open_dataset(root_ / "ds");
  EXPECT_EQ(d.manifest.inputs, m.inputs);
  ASSERT_EQ(m.inputs.size(), 4u);
  EXPECT_EQ(m.tokenizer_kind, "test-byte-special");
  EXPECT_EQ(m.end_of_text, 256);
  EXPECT_TRUE(m.tokenizer_copy.empty());
  // 58 bytes in all; the held-out quarter starts at the first line start at or after byte 43.
  EXPECT_EQ(text_of(all_tokens(d.train)), "alpha one\nalpha two\n|bravo\n|delta one\ndelta two\n");
  EXPECT_EQ(text_of(all_tokens(d.val)), "delta three\n");
  EXPECT_EQ(m.train.bytes + m.val.bytes, 58);
  EXPECT_EQ(m.val.bytes, 12);
  EXPECT_EQ(m.train.tokens, m.train.bytes + 2);
}

TEST_F(PrepareTest, WithoutEndOfTextDocumentsAreJoinedByALineBreak) {
  write("a.txt", "no newline at the end");
  write("b.txt", "second\nfile\nwith\nlines\n");
  const DatasetManifest m = prepare_dataset(tokenizer::ByteTokenizer(), "byte", options("ds", 0.2));
  const Dataset d = open_dataset(root_ / "ds");
  EXPECT_EQ(text_of(all_tokens(d.train)) + text_of(all_tokens(d.val)),
            "no newline at the end\nsecond\nfile\nwith\nlines\n");
  EXPECT_EQ(m.train.tokens, m.train.bytes);
  EXPECT_EQ(m.val.tokens, m.val.bytes);
}

TEST_F(PrepareTest, LargeFilesAreChunkedIndependentlyOfThreadsAndSharded) {
  std::string text;
  for (int i = 0; text.size() < (size_t{5} << 19); ++i) {
    text += "line " + std::to_string(i * 7919 % 10007) + " of a long file\n";
  }
  write("big.txt", text);
  PrepareOptions one = options("one", 0.1), two = options("two", 0.1);
  one.threads = 1;
  two.threads = 2;
  one.shard_tokens = two.shard_tokens = 1 << 18;
  const DatasetManifest a = prepare_dataset(tokenizer::ByteTokenizer(), "byte", one);
  const DatasetManifest b = prepare_dataset(tokenizer::ByteTokenizer(), "byte", two);
  EXPECT_EQ(a.train.shards.size(), 10u);
  EXPECT_EQ(dataset_manifest_to_json(a).dump(), dataset_manifest_to_json(b).dump());
  for (const std::string& shard : a.train.shards) {
    EXPECT_EQ(file_bytes(root_ / "one" / shard), file_bytes(root_ / "two" / shard)) << shard;
  }
  const Dataset d = open_dataset(root_ / "one");
  const std::string train = text_of(all_tokens(d.train)), val = text_of(all_tokens(d.val));
  EXPECT_EQ(train + val, text);
  EXPECT_EQ(train.back(), '\n');  // the held-out text starts on a fresh line
}

TEST_F(PrepareTest, BadInputsAreOneLineErrors) {
  write("a.txt", "some text\nmore text\n");
  EXPECT_EQ(error_of(tokenizer::ByteTokenizer(), options("ds", 1.0)),
            "--val-fraction must be in (0, 1), got 1");
  fs::create_directories(root_ / "full");
  std::ofstream(root_ / "full" / "x") << "x";
  EXPECT_EQ(error_of(tokenizer::ByteTokenizer(), options("full")),
            (root_ / "full").string() +
                ": already exists and is not an empty folder; prepare into a new one");
  PrepareOptions missing = options("ds");
  missing.inputs = {root_ / "nope.txt"};
  EXPECT_EQ(error_of(tokenizer::ByteTokenizer(), missing),
            (root_ / "nope.txt").string() + ": no such file or directory");
  fs::remove_all(root_ / "in");
  fs::create_directories(root_ / "in");
  write("empty.txt", "");
  EXPECT_EQ(error_of(tokenizer::ByteTokenizer(), options("ds")),
            (root_ / "in").string() + ": the corpus is empty");
}

TEST_F(PrepareTest, OpeningADamagedDatasetNamesTheFile) {
  write("a.txt", "some text\nmore text\nand more\n");
  prepare_dataset(tokenizer::ByteTokenizer(), "byte", options("ds"));
  const fs::path shard = root_ / "ds" / "train-000000.bin";
  std::string bytes = file_bytes(shard);
  bytes[bytes.size() - 3] ^= 0x20;
  std::ofstream(shard, std::ios::binary) << bytes;
  try {
    open_dataset(root_ / "ds");
    FAIL() << "opened a corrupted shard";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(shard.string() + ": corrupted token shard", 0), 0u)
        << e.what();
  }
  fs::remove(shard);
  EXPECT_THROW(open_dataset(root_ / "ds"), Error);
  EXPECT_THROW(open_dataset(root_ / "in"), Error);  // no dataset.json
}

TEST(DatasetManifest, RoundTripsAndRejectsBadFields) {
  DatasetManifest m;
  m.tokenizer_kind = "tessera-bpe";
  m.tokenizer_source = "/tok";
  m.tokenizer_copy = "tokenizer";
  m.vocab_size = 4096;
  m.end_of_text = 4095;
  m.inputs = {"/a.txt"};
  m.train = {{"train-000000.bin"}, 10, 30};
  m.val = {{"val-000000.bin"}, 2, 6};
  const nlohmann::json j = dataset_manifest_to_json(m);
  EXPECT_EQ(dataset_manifest_to_json(parse_dataset_manifest(j, "d.json")), j);

  auto error_of = [](nlohmann::json j) {
    try {
      parse_dataset_manifest(j, "d.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json bad = j;
  bad["train"]["shards"][0] = "../escape.bin";
  EXPECT_EQ(error_of(bad),
            "d.json: field 'train.shards[0]' must be a file name inside the dataset folder, got "
            "'../escape.bin'");
  bad = j;
  bad.erase("vocab_size");
  EXPECT_EQ(error_of(bad), "d.json: missing field 'vocab_size'");
  bad = j;
  bad["version"] = 2;
  EXPECT_EQ(error_of(bad), "d.json: field 'version' is 2; this build reads version 1");
  bad = j;
  bad["end_of_text"] = 4096;
  EXPECT_EQ(error_of(bad), "d.json: field 'end_of_text' is outside the vocabulary");
}

}  // namespace
}  // namespace tessera::data
