#include "tessera/data/gpt2_pretokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace tessera::data {
namespace {

using namespace std::string_literals;

std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for_each_gpt2_piece(text, [&](std::string_view piece) { out.emplace_back(piece); });
  return out;
}

using Pieces = std::vector<std::string>;

TEST(Gpt2Pretokenizer, SplitsAsTheGpt2Pattern) {
  EXPECT_EQ(pieces("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces("I'm don't we'll I'M"),
            (Pieces{"I", "'m", " don", "'t", " we", "'ll", " I", "'", "M"}));
  EXPECT_EQ(pieces("abc123 456!?"), (Pieces{"abc", "123", " 456", "!?"}));
  // A whitespace run before text leaves its last character to lead the next piece.
  EXPECT_EQ(pieces("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (Pieces{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a \n b  "), (Pieces{"a", " \n", " b", "  "}));
  EXPECT_EQ(pieces("?'s"), (Pieces{"?'", "s"}));
  EXPECT_EQ(pieces("caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c"),
            (Pieces{"caf\xc3\xa9", " \xe4\xb8\x96\xe7\x95\x8c"}));
  EXPECT_EQ(pieces(""), Pieces{});
}

TEST(Gpt2Pretokenizer, InvalidUtf8AndNulArePunctuation) {
  EXPECT_EQ(pieces("a\xff\xfe b"), (Pieces{"a", "\xff\xfe", " b"}));
  EXPECT_EQ(pieces("x \0\x01y"s), (Pieces{"x", " \0\x01"s, "y"}));
  // A truncated sequence and an encoded surrogate are bytes, never a letter.
  EXPECT_EQ(pieces("\xc3"), (Pieces{"\xc3"}));
  EXPECT_EQ(pieces("\xed\xa0\x80z"), (Pieces{"\xed\xa0\x80", "z"}));
}

TEST(Gpt2Pretokenizer, CutPointsKeepThePieces) {
  std::mt19937_64 rng(7);
  const std::string alphabet[] = {"a", "B", "7", " ",        " ",    "\n",           "\t",
                                  "'", "s", "!", "\xc3\xa9", "\xff", "\xe3\x80\x80", "\0"s};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int length = int(rng() % 400);
    for (int i = 0; i < length; ++i) text += alphabet[rng() % std::size(alphabet)];
    const std::vector<size_t> cuts = gpt2_cut_points(text, 1 + rng() % 16);
    ASSERT_EQ(cuts.front(), 0u);
    ASSERT_EQ(cuts.back(), text.size());
    Pieces joined;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      ASSERT_LT(cuts[i], cuts[i + 1]) << "cut " << i;
      for (auto& piece : pieces(std::string_view(text).substr(cuts[i], cuts[i + 1] - cuts[i]))) {
        joined.push_back(piece);
      }
    }
    ASSERT_EQ(joined, pieces(text)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace tessera::data
