// Every way a vocabulary file or tokenizer directory can be wrong ends in one line that names
// the file (and line) at fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tessera/core/error.h"
#include "tessera/data/base64.h"
#include "tessera/data/gpt2_vocab_files.h"
#include "tessera/data/tessera_tokenizer_files.h"
#include "tessera/data/tiktoken_ranks.h"
#include "tessera/data/tokenizer.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    return message;
  }
  ADD_FAILURE() << "no error";
  return "";
}

#define EXPECT_ERROR(statement, ...)                               \
  do {                                                             \
    const std::string message = error_of([&] { statement; });      \
    for (const char* part : {__VA_ARGS__}) {                       \
      EXPECT_NE(message.find(part), std::string::npos) << message; \
    }                                                              \
  } while (0)

TEST(Base64, RoundTripsAndRejectsNonCanonicalText) {
  for (std::string bytes : {"", "a", "ab", "abc", "abcd", "\xff\x00\x80"}) {
    EXPECT_EQ(base64_decode(base64_encode(bytes)), bytes);
  }
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  for (const char* bad : {"aGVsbG8", "aGV=bG8=", "aGVsbG9=", "a===", "aGVs!G8=", "===="}) {
    EXPECT_FALSE(base64_decode(bad).has_value()) << bad;
  }
}

TEST(TiktokenRanks, ParsesAndFormats) {
  const std::vector<std::string> tokens = parse_tiktoken_ranks("YQ== 0\nYg== 2\n", "r.tiktoken");
  EXPECT_EQ(tokens, (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(format_tiktoken_ranks(tokens), "YQ== 0\nYg== 2\n");
}

TEST(TiktokenRanks, BadLinesNameFileAndLine) {
  EXPECT_ERROR(parse_tiktoken_ranks("YQ== 0\n!!!! 1\n", "r.tiktoken"), "r.tiktoken:2:", "base64");
  EXPECT_ERROR(parse_tiktoken_ranks("YQ== 0\nYg== 0\n", "r.tiktoken"), "r.tiktoken:2:", "rank 0");
  EXPECT_ERROR(parse_tiktoken_ranks("YQ== 0\nYQ== 1\n", "r.tiktoken"),
               "r.tiktoken:2:", "already has rank 0");
  EXPECT_ERROR(parse_tiktoken_ranks("YQ== x\n", "r.tiktoken"), "r.tiktoken:1:", "\"x\"");
  EXPECT_ERROR(parse_tiktoken_ranks("YQ==\n", "r.tiktoken"), "r.tiktoken:1:");
  EXPECT_ERROR(parse_tiktoken_ranks("YQ== 99999999999\n", "r.tiktoken"), "r.tiktoken:1:");
  EXPECT_ERROR(parse_tiktoken_ranks("", "r.tiktoken"), "r.tiktoken", "no tokens");
}

TEST(Gpt2VocabFiles, ReadsMergesThroughTheByteMap) {
  // 'Ġ' (U+0120) is GPT-2's picture of the space byte.
  const BpeVocab vocab =
      parse_gpt2_vocab(R"({"a": 0, "b": 1, "\u0120": 2, "ab": 3, "\u0120ab": 4,
                                              "<|endoftext|>": 5})",
                       "encoder.json", "#version: 0.2\na b\nĠ ab\n", "vocab.bpe");
  EXPECT_EQ(vocab.tokens, (std::vector<std::string>{"a", "b", " ", "ab", " ab"}));
  ASSERT_EQ(vocab.merges.size(), 2u);
  EXPECT_EQ(vocab.merges[1].left, 2);
  EXPECT_EQ(vocab.merges[1].right, 3);
  EXPECT_EQ(vocab.merges[1].result, 4);
  EXPECT_EQ(vocab.merges[1].rank, 1);
  EXPECT_EQ(vocab.special_tokens,
            (std::vector<std::pair<std::string, int32_t>>{{"<|endoftext|>", 5}}));
}

TEST(Gpt2VocabFiles, BadFilesNameFileAndLine) {
  const char* encoder = R"({"a": 0, "b": 1, "ab": 2})";
  EXPECT_ERROR(parse_gpt2_vocab("[1, 2]", "enc.json", "", "v.bpe"), "enc.json", "object");
  EXPECT_ERROR(parse_gpt2_vocab("{\"a\": ", "enc.json", "", "v.bpe"), "enc.json", "JSON");
  EXPECT_ERROR(parse_gpt2_vocab("{\"a\": 1e999}", "enc.json", "", "v.bpe"), "enc.json", "JSON");
  EXPECT_ERROR(parse_gpt2_vocab(R"({"a": "0"})", "enc.json", "", "v.bpe"), "enc.json", "\"a\"");
  EXPECT_ERROR(parse_gpt2_vocab(R"({"a": 0, "b": 0})", "enc.json", "", "v.bpe"), "enc.json",
               "id 0");
  EXPECT_ERROR(parse_gpt2_vocab(R"({"a b": 0})", "enc.json", "", "v.bpe"), "enc.json", "\"a b\"");
  EXPECT_ERROR(parse_gpt2_vocab(encoder, "enc.json", "#version: 0.2\na b\nab\n", "v.bpe"),
               "v.bpe:3:", "two tokens");
  EXPECT_ERROR(parse_gpt2_vocab(encoder, "enc.json", "a  b\n", "v.bpe"), "v.bpe:1:", "two tokens");
  EXPECT_ERROR(parse_gpt2_vocab(encoder, "enc.json", "a c\n", "v.bpe"), "v.bpe:1:", "\"c\"",
               "enc.json");
  EXPECT_ERROR(parse_gpt2_vocab(encoder, "enc.json", "b a\n", "v.bpe"), "v.bpe:1:", "\"ba\"");
}

TEST(TesseraTokenizerConfig, BadConfigsNameTheFile) {
  const char* good = R"({"format": "tessera-bpe", "version": 1, "pattern": "gpt2",
                         "special_tokens": {"<|endoftext|>": 300}})";
  EXPECT_EQ(parse_tessera_config(good, "t.json").size(), 1u);
  EXPECT_ERROR(parse_tessera_config("nope", "t.json"), "t.json", "JSON");
  EXPECT_ERROR(parse_tessera_config(R"({"version": 1e999})", "t.json"), "t.json", "JSON");
  EXPECT_ERROR(parse_tessera_config(R"({"format": "tessera-bpe", "version": 2, "pattern": "gpt2",
                                        "special_tokens": {}})",
                                    "t.json"),
               "t.json", "version");
  EXPECT_ERROR(parse_tessera_config(R"({"format": "tessera-bpe", "version": 1, "pattern": "x",
                                        "special_tokens": {}})",
                                    "t.json"),
               "t.json", "pattern");
  EXPECT_ERROR(parse_tessera_config(R"({"format": "tessera-bpe", "version": 1})", "t.json"),
               "t.json", "pattern");
  EXPECT_ERROR(parse_tessera_config(R"({"format": "tessera-bpe", "version": 1, "pattern": "gpt2",
                                        "special_tokens": {"<|endoftext|>": -1}})",
                                    "t.json"),
               "t.json", "<|endoftext|>");
  EXPECT_ERROR(parse_tessera_config(R"({"formats": 1})", "t.json"), "t.json", "formats");
}

TEST(LoadTokenizer, DirectoryProblemsNameTheDirectory) {
  testing::TempDir dir("tokenizer-dirs");
  EXPECT_ERROR(load_tokenizer(dir / "absent"), "absent", "no such tokenizer directory");
  EXPECT_ERROR(load_tokenizer(dir.path().string()), "no tokenizer found",
               "encoder.json + vocab.bpe, *.tiktoken, or tokenizer.json");
  testing::write_file(dir / "encoder.json", "{}");
  EXPECT_ERROR(load_tokenizer(dir.path().string()), "needs both encoder.json and vocab.bpe");
  fs::remove(dir / "encoder.json");
  testing::write_file(dir / "a.tiktoken", "YQ== 0\n");
  testing::write_file(dir / "b.tiktoken", "YQ== 0\n");
  EXPECT_ERROR(load_tokenizer(dir.path().string()), "2 .tiktoken files");
  fs::remove(dir / "b.tiktoken");
  // A rank file must cover every byte, or some text could not be encoded.
  EXPECT_ERROR(load_tokenizer(dir.path().string()), "byte 0x00 has no token");
  testing::write_file(dir / "tokenizer.json", R"({"format": "tessera-bpe", "version": 1,
      "pattern": "gpt2", "special_tokens": {}})");
  EXPECT_ERROR(load_tokenizer(dir.path().string()), "ranks.tiktoken", "cannot read");
  testing::write_file(dir / "plain", "");
  EXPECT_ERROR(load_tokenizer(dir / "plain"), "plain", "must be \"byte\" or a directory");
}

TEST(LoadTokenizer, NonUtf8PathIsQuotedPrintably) {
  testing::TempDir dir("tokenizer-bytes");
  const std::string odd = dir / "tok\xff\xfe";
  EXPECT_ERROR(load_tokenizer(odd), "tok\\xff\\xfe", "no such tokenizer directory");
  fs::create_directories(odd);
  EXPECT_ERROR(load_tokenizer(odd), "tok\\xff\\xfe", "no tokenizer found");
}

}  // namespace
}  // namespace tessera::data
