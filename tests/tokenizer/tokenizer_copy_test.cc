// A tokenizer folder copied into a dataset or a run folder keeps the digests of its files, so a
// byte changed in the copy is refused where the copy is read, naming the file.
#include "tessera/tokenizer/tokenizer_copy.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tessera/core/text_corpus.h"
#include "tessera/tokenizer/tessera_tokenizer_files.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::tokenizer {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;

// Changes one byte of `path` in place.
void flip_byte(const fs::path& path, size_t at) {
  std::string text = read_text_file(path);
  ASSERT_LT(at, text.size());
  text[at] = char(text[at] ^ 0x01);
  write_text_file(path, text);
}

class TokenizerCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::fresh_test_dir("tessera-tokenizer-copy");
    source_ = dir_ / "tok";
    copy_ = dir_ / "run" / "tokenizer";
    BpeVocab vocab;
    for (int b = 0; b < 256; ++b) vocab.tokens.emplace_back(1, char(b));
    for (const char* merged : {"th", "the", " the"}) vocab.tokens.emplace_back(merged);
    vocab.special_tokens = {{"<|endoftext|>", 259}};
    save_tessera_tokenizer(vocab, source_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<int32_t> encode(const fs::path& dir) {
    return load_tokenizer(dir.string())->encode(" the thing");
  }

  fs::path dir_, source_, copy_;
};

TEST_F(TokenizerCopy, ACopyKeepsDigestsAndEncodesAsTheOriginal) {
  copy_tokenizer(source_, copy_);
  EXPECT_TRUE(fs::is_regular_file(copy_ / kTokenizerDigestsFile));
  EXPECT_EQ(encode(copy_), encode(source_));
  // Copying again over an intact copy leaves it as it is.
  const auto written = fs::last_write_time(copy_ / kTesseraRanksFile);
  copy_tokenizer(source_, copy_);
  EXPECT_EQ(fs::last_write_time(copy_ / kTesseraRanksFile), written);
}

TEST_F(TokenizerCopy, AChangedByteInTheCopyIsRefusedNamingTheFile) {
  copy_tokenizer(source_, copy_);
  for (const char* file : {kTesseraRanksFile, kTesseraConfigFile}) {
    copy_tokenizer(source_, copy_);  // restores the copy changed by the last round
    flip_byte(copy_ / file, 2);
    expect_error([&] { load_tokenizer(copy_.string()); },
                 {(copy_ / file).string() + ": checksum mismatch",
                  (copy_ / kTokenizerDigestsFile).string(), "the tokenizer copy is corrupted"});
  }
}

TEST_F(TokenizerCopy, CopyingACorruptedCopyIsRefusedNamingTheFile) {
  copy_tokenizer(source_, copy_);
  flip_byte(copy_ / kTesseraRanksFile, 5);
  expect_error([&] { copy_tokenizer(copy_, dir_ / "again"); },
               {(copy_ / kTesseraRanksFile).string(), "checksum mismatch"});
}

TEST_F(TokenizerCopy, AFileTheDigestsDoNotListIsRefused) {
  copy_tokenizer(source_, copy_);
  write_text_file(copy_ / "notes.txt", "added later\n");
  expect_error([&] { TokenizerFileReader(copy_).read(copy_ / "notes.txt"); },
               {(copy_ / "notes.txt").string(), "not listed in", kTokenizerDigestsFile});
  // A copy takes only the files the tokenizer is read from.
  copy_tokenizer(copy_, dir_ / "again");
  EXPECT_FALSE(fs::exists(dir_ / "again" / "notes.txt"));
  EXPECT_NO_THROW(load_tokenizer((dir_ / "again").string()));
}

// Files that would make the folder read as another format are read through the digests too.
TEST_F(TokenizerCopy, AFileThatChangesTheFormatIsRefused) {
  copy_tokenizer(source_, copy_);
  fs::remove(copy_ / kTesseraRanksFile);
  expect_error([&] { load_tokenizer(copy_.string()); },
               {(copy_ / kTesseraRanksFile).string(), "missing"});
}

TEST_F(TokenizerCopy, AModelFolderGivesOnlyItsTokenizerFiles) {
  write_text_file(source_ / "model.safetensors", "weights\n");
  copy_tokenizer(source_, copy_);
  EXPECT_FALSE(fs::exists(copy_ / "model.safetensors"));
  EXPECT_TRUE(fs::exists(copy_ / kTesseraRanksFile));
}

TEST_F(TokenizerCopy, AListedFileThatIsGoneIsRefused) {
  copy_tokenizer(source_, copy_);
  // Without tokenizer.json the folder would read as a bare rank file, losing its special tokens.
  fs::remove(copy_ / kTesseraConfigFile);
  expect_error([&] { load_tokenizer(copy_.string()); },
               {(copy_ / kTesseraConfigFile).string(), "missing", "incomplete"});
}

TEST_F(TokenizerCopy, AFolderWithoutDigestsIsReadUnchecked) {
  EXPECT_FALSE(fs::exists(source_ / kTokenizerDigestsFile));
  write_text_file(source_ / "README", "a folder of one's own\n");
  EXPECT_EQ(TokenizerFileReader(source_).read(source_ / "README"), "a folder of one's own\n");
  EXPECT_NO_THROW(load_tokenizer(source_.string()));
}

}  // namespace
}  // namespace tessera::tokenizer
