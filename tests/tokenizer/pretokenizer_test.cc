#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tessera/tokenizer/gpt2_pretokenizer.h"
#include "tessera/tokenizer/llama3_pretokenizer.h"

namespace tessera::tokenizer {
namespace {

using namespace std::string_literals;

using Pieces = std::vector<std::string>;
using PieceEnd = size_t (*)(std::string_view, size_t);
using CutPoints = std::vector<size_t> (*)(std::string_view, size_t);

Pieces pieces_of(std::string_view text, PieceEnd piece_end) {
  Pieces out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = piece_end(text, pos);
    out.emplace_back(text.substr(pos, end - pos));
    pos = end;
  }
  return out;
}

Pieces pieces(std::string_view text) {
  Pieces out;
  for_each_gpt2_piece(text, [&](std::string_view piece) { out.emplace_back(piece); });
  EXPECT_EQ(out, pieces_of(text, gpt2_piece_end));
  return out;
}

Pieces llama3_pieces(std::string_view text) { return pieces_of(text, llama3_piece_end); }

// Random texts cut at the cut points split into the pieces the whole text has.
void expect_cut_points_keep_the_pieces(PieceEnd piece_end, CutPoints cut_points) {
  std::mt19937_64 rng(7);
  const std::string alphabet[] = {"a", "B", "7", " ", " ",        "\n",   "\r\n",         "\t", "'",
                                  "s", "!", ".", "1", "\xc3\xa9", "\xff", "\xe3\x80\x80", "\0"s};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int length = int(rng() % 400);
    for (int i = 0; i < length; ++i) text += alphabet[rng() % std::size(alphabet)];
    const std::vector<size_t> cuts = cut_points(text, 1 + rng() % 16);
    ASSERT_EQ(cuts.front(), 0u);
    ASSERT_EQ(cuts.back(), text.size());
    Pieces joined;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      ASSERT_LT(cuts[i], cuts[i + 1]) << "cut " << i;
      const std::string_view part = std::string_view(text).substr(cuts[i], cuts[i + 1] - cuts[i]);
      for (auto& piece : pieces_of(part, piece_end)) joined.push_back(piece);
    }
    ASSERT_EQ(joined, pieces_of(text, piece_end)) << "trial " << trial;
  }
}

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
  expect_cut_points_keep_the_pieces(gpt2_piece_end, gpt2_cut_points);
}

TEST(Llama3Pretokenizer, SplitsAsTheLlama3Pattern) {
  EXPECT_EQ(llama3_pieces("Hello world"), (Pieces{"Hello", " world"}));
  // Contractions in either case; a letter run takes one leading non-letter, non-digit.
  EXPECT_EQ(llama3_pieces("I'M don't (x) \"quoted\""),
            (Pieces{"I", "'M", " don", "'t", " (", "x", ")", " \"", "quoted", "\""}));
  // Digits in threes, never led by a space.
  EXPECT_EQ(llama3_pieces("abc1234567 89"), (Pieces{"abc", "123", "456", "7", " ", "89"}));
  // Punctuation keeps the line breaks after it; whitespace with a line break ends after it.
  EXPECT_EQ(llama3_pieces("end.\n\nNext  \n  line"),
            (Pieces{"end", ".\n\n", "Next", "  \n", " ", " line"}));
  EXPECT_EQ(llama3_pieces("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(llama3_pieces("\tword"), (Pieces{"\tword"}));
  EXPECT_EQ(llama3_pieces("caf\xc3\xa9 \xe4\xb8\x96\xe7\x95\x8c"),
            (Pieces{"caf\xc3\xa9", " \xe4\xb8\x96\xe7\x95\x8c"}));
  // JavaScript's \s holds U+FEFF, which may lead a letter run as any space does.
  EXPECT_EQ(llama3_pieces("\xef\xbb\xbfword"), (Pieces{"\xef\xbb\xbfword"}));
  EXPECT_EQ(llama3_pieces("x\xff\xfe y"), (Pieces{"x", "\xff\xfe", " y"}));
  EXPECT_EQ(llama3_pieces("\xffy"), (Pieces{"\xffy"}));
  EXPECT_EQ(llama3_pieces(""), Pieces{});
}

TEST(Llama3Pretokenizer, CutPointsKeepThePieces) {
  expect_cut_points_keep_the_pieces(llama3_piece_end, llama3_cut_points);
}

}  // namespace
}  // namespace tessera::tokenizer
