#include "tessera/tokenizer/byte_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tessera/core/error.h"

namespace tessera::tokenizer {
namespace {

TEST(ByteTokenizer, RoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  ByteTokenizer tok;
  std::vector<int32_t> ids = tok.encode(all);
  ASSERT_EQ(ids.size(), 256u);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(ids[b], b);
  EXPECT_EQ(tok.decode(ids), all);
}

TEST(ByteTokenizer, RoundTripsNulAndInvalidUtf8) {
  const std::string text("a\0b\xff\xfe\xc3(\x80 caf\xc3\xa9", 14);
  ByteTokenizer tok;
  std::vector<int32_t> ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(ids[3], 255);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_TRUE(tok.encode("").empty());
  EXPECT_EQ(tok.decode({}), "");
}

TEST(ByteTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  ByteTokenizer tok;
  for (int32_t bad : {256, -1}) {
    std::vector<int32_t> ids = {65, bad};
    try {
      tok.decode(ids);
      FAIL() << "decode accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera::tokenizer
