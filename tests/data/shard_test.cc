#include "tessera/data/shard.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tessera/core/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/mapped_file.h"
#include "tessera/core/targets.h"

namespace tessera::data {
namespace {

std::vector<int32_t> read_all(const ShardView& view) {
  std::vector<int32_t> out(view.size());
  view.copy(0, view.size(), out.data());
  return out;
}

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_shard(bytes, "s.bin");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rewrites the header checksum so a test can change one field and reach the check behind it.
void reseal_header(std::vector<uint8_t>& bytes) {
  const uint32_t crc = crc32(bytes.data(), 40);
  for (int i = 0; i < 4; ++i) bytes[40 + i] = uint8_t(crc >> (8 * i));
}

TEST(Shard, RoundTripsSmallAndLargeVocabularies) {
  const std::vector<int32_t> tokens = {0, 1, 255, 4095, 7, 65535};
  const std::vector<uint8_t> u16 = encode_shard(tokens, 65536);
  EXPECT_EQ(u16.size(), kShardHeaderBytes + 2 * tokens.size());
  ShardView view = parse_shard(u16, "u16");
  EXPECT_EQ(view.token_bytes(), 2);
  EXPECT_EQ(view.vocab_size(), 65536);
  EXPECT_EQ(read_all(view), tokens);

  const std::vector<int32_t> big = {0, 65536, 100276, 3};
  const std::vector<uint8_t> u32 = encode_shard(big, 100277);
  view = parse_shard(u32, "u32");
  EXPECT_EQ(view.token_bytes(), 4);
  EXPECT_EQ(read_all(view), big);
  std::vector<int32_t> middle(2);
  view.copy(1, 2, middle.data());
  EXPECT_EQ(middle, (std::vector<int32_t>{65536, 100276}));

  EXPECT_EQ(parse_shard(encode_shard({}, 256), "empty").size(), 0);
}

// A loss mask travels with the tokens (version 2), crosses byte boundaries and is checksummed;
// a version-1 shard trains on every token.
TEST(Shard, CarriesALossMask) {
  const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  const std::vector<uint8_t> trained = {0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0};
  std::vector<uint8_t> bytes = encode_shard(tokens, 256, trained);
  EXPECT_EQ(bytes.size(), kShardHeaderBytes + 2 * tokens.size() + 2);
  const ShardView view = parse_shard(bytes, "masked");
  EXPECT_TRUE(view.has_loss_mask());
  EXPECT_EQ(read_all(view), tokens);
  std::vector<int32_t> targets(8);
  view.copy(3, 8, targets.data());
  view.mark_untrained(3, 8, targets.data());
  EXPECT_EQ(targets,
            (std::vector<int32_t>{kIgnoredTarget, kIgnoredTarget, kIgnoredTarget, kIgnoredTarget,
                                  kIgnoredTarget, 13, 14, kIgnoredTarget}));

  const std::vector<uint8_t> plain_bytes = encode_shard(tokens, 256);  // the view reads it
  const ShardView plain = parse_shard(plain_bytes, "plain");
  EXPECT_FALSE(plain.has_loss_mask());
  std::vector<int32_t> all(tokens.size());
  plain.copy(0, 11, all.data());
  plain.mark_untrained(0, 11, all.data());
  EXPECT_EQ(all, tokens);

  std::vector<uint8_t> flipped = bytes;
  flipped.back() ^= 1;
  EXPECT_NE(error_of(flipped).find("payload checksum"), std::string::npos) << error_of(flipped);
  std::vector<uint8_t> short_mask = bytes;
  short_mask.pop_back();
  EXPECT_NE(error_of(short_mask).find("loss mask"), std::string::npos) << error_of(short_mask);
  EXPECT_THROW(encode_shard(tokens, 256, std::vector<uint8_t>(3, 1)), Error);
}

TEST(Shard, WritesAFileThatMapsBack) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessera-shard-" + std::to_string(::getpid()) + ".bin");
  const std::vector<int32_t> tokens = {5, 4, 3, 2, 1};
  write_shard(path, tokens, 6);
  {
    MappedFile file(path);
    EXPECT_EQ(read_all(parse_shard(file.bytes(), path.string())), tokens);
  }
  std::filesystem::remove(path);
  EXPECT_THROW(MappedFile{path}, Error);
}

TEST(Shard, EncodeRejectsIdsOutsideTheVocabulary) {
  EXPECT_THROW(encode_shard(std::vector<int32_t>{1, 256}, 256), Error);
  EXPECT_THROW(encode_shard(std::vector<int32_t>{-1}, 256), Error);
}

class BadShard : public ::testing::Test {
 protected:
  std::vector<int32_t> tokens_ = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> bytes_ = encode_shard(tokens_, 100);
};

TEST_F(BadShard, TruncatedHeader) {
  bytes_.resize(20);
  EXPECT_EQ(error_of(bytes_),
            "s.bin: truncated token shard: 20 bytes, shorter than the 48-byte header");
}

TEST_F(BadShard, TruncatedPayload) {
  bytes_.pop_back();
  EXPECT_EQ(error_of(bytes_),
            "s.bin: truncated or padded token shard: the header promises 8 tokens of 2 bytes but "
            "15 bytes follow it");
  bytes_.push_back(0);
  bytes_.push_back(0);
  EXPECT_NE(error_of(bytes_).find("17 bytes follow it"), std::string::npos);
}

TEST_F(BadShard, WrongMagic) {
  bytes_[0] = 'X';
  EXPECT_EQ(error_of(bytes_),
            "s.bin: not a token shard (the file does not start with \"TSRASHRD\")");
}

TEST_F(BadShard, WrongVersion) {
  bytes_[8] = 3;
  reseal_header(bytes_);
  EXPECT_EQ(error_of(bytes_),
            "s.bin: unsupported token shard version 3 (this build reads 1 and 2)");
}

TEST_F(BadShard, FlippedHeaderByte) {
  bytes_[30] ^= 0x10;  // inside the vocabulary size
  EXPECT_EQ(error_of(bytes_), "s.bin: corrupted token shard: the header checksum does not match");
}

TEST_F(BadShard, FlippedPayloadByte) {
  bytes_[kShardHeaderBytes + 5] ^= 0x01;
  const std::string e = error_of(bytes_);
  EXPECT_EQ(e.rfind("s.bin: corrupted token shard: payload checksum ", 0), 0u) << e;
}

TEST_F(BadShard, BadWidthAndVocabulary) {
  bytes_[16] = 3;
  reseal_header(bytes_);
  EXPECT_EQ(error_of(bytes_), "s.bin: token shard width 3 bytes per token is not 2 or 4");
  bytes_ = encode_shard(tokens_, 100);
  bytes_[26] = 0x01;  // vocabulary 65536 + 100 with 2-byte tokens
  reseal_header(bytes_);
  EXPECT_EQ(error_of(bytes_),
            "s.bin: token shard vocabulary size 65636 does not fit its 2-byte tokens");
}

TEST_F(BadShard, TokenAtOrAboveTheVocabularyNamesItsIndex) {
  // A writer that lied about the vocabulary: ids valid for 100, header says 6.
  bytes_[24] = 6;
  reseal_header(bytes_);
  EXPECT_EQ(error_of(bytes_), "s.bin: token id 6 at index 5 is outside the vocabulary [0, 6)");
}

}  // namespace
}  // namespace tessera::data
