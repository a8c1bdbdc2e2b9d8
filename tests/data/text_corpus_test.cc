#include "tessera/core/text_corpus.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tests/test_dir.h"

namespace fs = std::filesystem;

namespace tessera::data {
namespace {

class TextCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = testing::fresh_test_dir("tessera-corpus"); }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(root_ / "locked.txt", fs::perms::owner_all, ec);
    fs::remove_all(root_, ec);
  }
  void write(const fs::path& relative, const std::string& text) {
    fs::path path = root_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
  }
  // The error of listing path and reading each of its files, or "".
  std::string error_of(const fs::path& path) {
    try {
      for (const fs::path& file : corpus_files(path)) read_text_file(file);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  fs::path root_;
};

TEST_F(TextCorpusTest, ReadsAFileWhole) {
  const std::string text("line one\nline two\n\0binary\xff", 26);
  write("corpus.txt", text);
  EXPECT_EQ(corpus_files(root_ / "corpus.txt"), std::vector<fs::path>{root_ / "corpus.txt"});
  EXPECT_EQ(read_text_file(root_ / "corpus.txt"), text);
}

TEST_F(TextCorpusTest, WalksAFolderInSortedOrderSkippingHidden) {
  write("b.txt", "B");
  write("a/y.txt", "AY");
  write("a/x/deep.txt", "AXD");
  write("c.txt", "C");
  write(".hidden.txt", "HIDDEN");
  write(".git/config", "GIT");
  write("a/.secret/s.txt", "SECRET");
  write("empty.txt", "");
  EXPECT_EQ(corpus_files(root_),
            (std::vector<fs::path>{root_ / "a/x/deep.txt", root_ / "a/y.txt", root_ / "b.txt",
                                   root_ / "c.txt", root_ / "empty.txt"}));
  fs::create_directories(root_ / "bare");
  EXPECT_TRUE(corpus_files(root_ / "bare").empty());
}

TEST_F(TextCorpusTest, MissingPathIsAnError) {
  const fs::path missing = root_ / "nope";
  EXPECT_EQ(error_of(missing), missing.string() + ": no such file or directory");
}

TEST_F(TextCorpusTest, NeitherFileNorFolderIsAnError) {
  EXPECT_EQ(error_of("/dev/null"), "/dev/null: not a regular file or folder");
}

TEST_F(TextCorpusTest, UnreadableFileIsAnError) {
  write("locked.txt", "secret");
  const fs::path path = root_ / "locked.txt";
  fs::permissions(path, fs::perms::none);
  if (std::ifstream(path).good()) GTEST_SKIP() << "running with permission to read anything";
  const std::string message = error_of(path);
  EXPECT_NE(message.find(path.string() + ": cannot read"), std::string::npos) << message;
}

TEST_F(TextCorpusTest, ReadErrorIsAnError) {
  // Reading /proc/self/mem at offset 0 fails with EIO even for root.
  const fs::path path = "/proc/self/mem";
  if (!fs::exists(path)) GTEST_SKIP() << "no /proc";
  const std::string message = error_of(path);
  EXPECT_NE(message.find("/proc/self/mem: cannot read"), std::string::npos) << message;
}

}  // namespace
}  // namespace tessera::data
