#include "tessera/serve/text_stream.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/core/utf8.h"
#include "tests/expect_error.h"

namespace tessera::serve {
namespace {

using Chunks = std::vector<std::string>;

// A tokenizer whose tokens are whatever pieces of bytes a test needs, added as it asks for them.
class PieceTokenizer final : public tokenizer::Tokenizer {
 public:
  int32_t id(const std::string& piece) {
    pieces_.push_back(piece);
    return int32_t(pieces_.size() - 1);
  }
  std::vector<int32_t> encode(std::string_view) const override { return {}; }
  std::string decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids) text += pieces_.at(id);
    return text;
  }
  int64_t vocab_size() const override { return int64_t(pieces_.size()); }
  std::optional<int32_t> end_of_text() const override { return std::nullopt; }
  std::string kind() const override { return "pieces"; }
  const std::vector<std::pair<std::string, int32_t>>& special_tokens() const override {
    return no_special_;
  }

 private:
  std::vector<std::string> pieces_;
  std::vector<std::pair<std::string, int32_t>> no_special_;
};

bool valid_utf8(const std::string& text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = decode_utf8(text, pos);
    if (c.code_point == Utf8Char::kInvalidByte) return false;
    pos += c.length;
  }
  return true;
}

// Streams pieces through a TextStream with the given stop strings and returns what each push
// released, then what finish released.
struct Streamed {
  Chunks pushed;
  std::string finished, text;
  bool stopped;
};

Streamed stream(const Chunks& pieces, const std::vector<std::string>& stop) {
  PieceTokenizer tokenizer;
  std::vector<int32_t> ids;
  for (const std::string& piece : pieces) ids.push_back(tokenizer.id(piece));
  TextStream text(tokenizer, stop);
  Streamed out;
  for (int32_t id : ids) out.pushed.emplace_back(text.push(id));
  out.stopped = text.stopped();
  out.finished = text.finish();
  out.text = text.text();
  return out;
}

const std::string kEuro = "\xE2\x82\xAC";  // U+20AC, three bytes
const std::string kReplacement = "\xEF\xBF\xBD";

TEST(TextStream, HoldsBackACharacterSplitAcrossTokens) {
  const auto byte = tokenizer::load_tokenizer("byte");
  TextStream text(*byte, {});
  const std::string input = "h" + kEuro + "!";
  Chunks pushed;
  for (unsigned char b : input) pushed.emplace_back(text.push(b));
  EXPECT_EQ(pushed, (Chunks{"h", "", "", kEuro, "!"}));
  EXPECT_EQ(text.finish(), "");
  EXPECT_EQ(text.text(), input);
  EXPECT_FALSE(text.stopped());
}

TEST(TextStream, StopStringSplitAcrossTokens) {
  const Streamed s = stream({"Hello", " EN", "D of", " it"}, {" END"});
  EXPECT_EQ(s.pushed, (Chunks{"Hello", "", "", ""}));
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.finished, "");
  EXPECT_EQ(s.text, "Hello");
}

TEST(TextStream, StopStringInsideAToken) {
  const Streamed s = stream({"x", "abcSTOPdef", "more"}, {"STOP"});
  EXPECT_EQ(s.pushed, (Chunks{"x", "abc", ""}));
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "xabc");
}

TEST(TextStream, TheEarliestStopStringWins) {
  const Streamed s = stream({"xab"}, {"b", "ab"});
  EXPECT_EQ(s.text, "x");
  EXPECT_TRUE(s.stopped);
}

TEST(TextStream, StopStringWithAMultiByteCharacter) {
  const Streamed s = stream({"5 ", "\xE2", "\x82", "\xAC", "0"}, {kEuro});
  EXPECT_EQ(s.pushed, (Chunks{"5 ", "", "", "", ""}));
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "5 ");
}

TEST(TextStream, ReleasesAHeldBackPrefixThatIsNoStopString) {
  Streamed s = stream({"a\n", "b"}, {"\n\n"});
  EXPECT_EQ(s.pushed, (Chunks{"a", "\nb"}));
  EXPECT_FALSE(s.stopped);

  // The longest end that may begin any stop string is held: "ab" for "abcd", not just "b".
  s = stream({"xab", "cf", "bc", "e!"}, {"abcd", "bce"});
  EXPECT_EQ(s.pushed, (Chunks{"x", "abcf", "", ""}));
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.text, "xabcf");

  // At the end, a prefix is only text.
  s = stream({"xEN"}, {"END"});
  EXPECT_EQ(s.pushed, (Chunks{"x"}));
  EXPECT_EQ(s.finished, "EN");
  EXPECT_EQ(s.text, "xEN");
  EXPECT_FALSE(s.stopped);
}

TEST(TextStream, InvalidUtf8BecomesReplacementCharacters) {
  // A byte that starts nothing, one per byte.
  Streamed s = stream({"a\xFF", "b"}, {});
  EXPECT_EQ(s.pushed, (Chunks{"a" + kReplacement, "b"}));
  // A truncated character followed by something else is one U+FFFD, released once it is known.
  s = stream({"\xE2\x82", "x"}, {});
  EXPECT_EQ(s.pushed, (Chunks{"", kReplacement + "x"}));
  // Overlong forms and surrogates: every byte on its own.
  s = stream({"\xC0\xAF", "\xED\xA0\x80"}, {});
  EXPECT_EQ(s.text, kReplacement + kReplacement + kReplacement + kReplacement + kReplacement);
  // An incomplete character at the end.
  s = stream({"ok\xF0\x9F"}, {});
  EXPECT_EQ(s.pushed, (Chunks{"ok"}));
  EXPECT_EQ(s.finished, kReplacement);
  EXPECT_EQ(s.text, "ok" + kReplacement);
}

TEST(TextStream, HowTextIsSplitIntoTokensNeverChangesTheResult) {
  const std::string input = "caf\xC3\xA9 \xFF" + kEuro + " <e> ok <end> after";
  const std::vector<std::string> stop = {"<end>", "\xC3\xA9 \xEF\xBF\xBD\xE2\x82\xAC!"};
  const Streamed whole = stream({input}, stop);
  EXPECT_TRUE(whole.stopped);
  EXPECT_EQ(whole.text, "caf\xC3\xA9 " + kReplacement + kEuro + " <e> ok ");
  for (size_t i = 0; i <= input.size(); ++i) {
    for (size_t j = i; j <= input.size(); ++j) {
      const Streamed s =
          stream({input.substr(0, i), input.substr(i, j - i), input.substr(j)}, stop);
      EXPECT_EQ(s.text, whole.text) << i << " " << j;
      EXPECT_TRUE(s.stopped);
      std::string joined;
      for (const std::string& chunk : s.pushed) {
        EXPECT_TRUE(valid_utf8(chunk)) << i << " " << j;
        joined += chunk;
      }
      EXPECT_EQ(joined + s.finished, s.text);
    }
  }
}

TEST(TextStream, RejectsBadStopStrings) {
  const auto byte = tokenizer::load_tokenizer("byte");
  testing::expect_error([&] { TextStream(*byte, {"a", ""}); }, {"stop string 2 of 2", "empty"});
  testing::expect_error([&] { TextStream(*byte, {"a\xFF"}); }, {"a\\xff", "UTF-8"});
  testing::expect_error(
      [&] {
        TextStream(*byte, {"a", "b", "c", "d", "e", "f", "g", "h", "i"});
      },
      {"9", "at most 8"});
}

}  // namespace
}  // namespace tessera::serve
