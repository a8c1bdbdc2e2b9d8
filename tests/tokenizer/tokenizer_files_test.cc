// Every way a vocabulary file or tokenizer directory can be wrong ends in one line that names
// the file (and line) at fault.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"
#include "tessera/tokenizer/base64.h"
#include "tessera/tokenizer/gpt2_vocab_files.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"
#include "tessera/tokenizer/llama3_pretokenizer.h"
#include "tessera/tokenizer/tessera_tokenizer_files.h"
#include "tessera/tokenizer/tiktoken_ranks.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::tokenizer {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

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
  const std::vector<std::string> tokens =
      parse_tiktoken_ranks("YQ== 0\nYg== 2\n", "r.tiktoken").tokens;
  EXPECT_EQ(tokens, (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(format_tiktoken_ranks(tokens), "YQ== 0\nYg== 2\n");
}

// The 256 bytes at ranks 0-255, then "th" (256), "the" (257) and " the" (258).
std::string byte_level_ranks() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  for (const char* merged : {"th", "the", " the"}) tokens.emplace_back(merged);
  return format_tiktoken_ranks(tokens);
}

// `text` with its one occurrence of `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(text.find(from, at + 1), std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(TiktokenRanks, AFlippedBase64ByteIsRefusedNamingTheFileAndLine) {
  const std::string good = byte_level_ranks();
  const BpeVocab vocab = parse_tiktoken_ranks(good, "r.tiktoken");
  EXPECT_EQ(vocab.tokens[257], "the");
  EXPECT_FALSE(vocab.merges.empty());
  // "the" (line 258) read as "xhe", which no two tokens of lower rank make.
  EXPECT_ERROR(parse_tiktoken_ranks(replaced(good, "dGhl 257", "eGhl 257"), "r.tiktoken"),
               "r.tiktoken:258:", "\"xhe\" (rank 257)", "corrupted");
  // "b" (rank 98, line 99) read as "c", which line 100 gives rank 99.
  EXPECT_ERROR(parse_tiktoken_ranks(replaced(good, "Yg== 98", "Yw== 98"), "r.tiktoken"),
               "r.tiktoken:100:", "already has rank 98 on line 99");
  // A single byte's base64 with a flipped padding bit is no canonical base64 at all.
  EXPECT_ERROR(parse_tiktoken_ranks(replaced(good, "YQ== 97", "YR== 97"), "r.tiktoken"),
               "r.tiktoken:98:", "not base64");
  // A byte rank holding two bytes.
  EXPECT_ERROR(parse_tiktoken_ranks(replaced(good, "YQ== 97", "YWE= 97"), "r.tiktoken"),
               "r.tiktoken:98:", "rank 97", "single bytes");
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
  EXPECT_ERROR(load_tokenizer(dir.path().string()), "no tokenizer found", "tokenizer.json",
               "vocab.json + merges.txt", "encoder.json + vocab.bpe", "*.tiktoken");
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
  EXPECT_ERROR(load_tokenizer(dir.path().string()), "tokenizer.json", "needs ranks.tiktoken");
  testing::write_file(dir / "plain", "");
  EXPECT_ERROR(load_tokenizer(dir / "plain"), "plain", "must be \"byte\" or a directory");
}

// A Hugging Face tokenizer.json over every byte and the merges a b, ab c; its pre_tokenizer and
// any further top-level or model keys are given as JSON text.
std::string hf_json(const std::string& pre_tokenizer, const std::string& extra = "",
                    const std::string& model_extra = "") {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[map_gpt2_bytes(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["<|endoftext|>"] = 258;
  return R"({"added_tokens": [{"id": 258, "content": "<|endoftext|>", "special": true}],
             "pre_tokenizer": )" +
         pre_tokenizer + extra + R"(, "model": {"type": "BPE", "vocab": )" + vocab.dump() +
         R"(, "merges": ["a b", ["ab", "c"]])" + model_extra + "}}";
}

const std::string kGpt2Split = R"({"type": "ByteLevel", "add_prefix_space": false,
                                    "use_regex": true})";
const std::string kLlama3Split =
    R"({"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": )" +
    nlohmann::json(std::string(kLlama3Pattern)).dump() +
    R"(}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})";

TEST(HfTokenizerFile, ReadsGpt2AndLlama3Styles) {
  const BpeVocab gpt2 = parse_hf_tokenizer(hf_json(kGpt2Split), "t.json");
  EXPECT_EQ(gpt2.pattern, SplitPattern::kGpt2);
  EXPECT_EQ(gpt2.tokens.size(), 258u);
  ASSERT_EQ(gpt2.merges.size(), 2u);
  EXPECT_EQ(gpt2.merges[1].left, 256);
  EXPECT_EQ(gpt2.merges[1].result, 257);
  EXPECT_EQ(gpt2.special_tokens,
            (std::vector<std::pair<std::string, int32_t>>{{"<|endoftext|>", 258}}));
  EXPECT_EQ(parse_hf_tokenizer(hf_json(kLlama3Split), "t.json").pattern, SplitPattern::kLlama3);

  testing::TempDir dir("hf-tokenizer");
  testing::write_file(dir / "tokenizer.json", hf_json(kLlama3Split));
  const std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(dir.path().string());
  EXPECT_EQ(tokenizer->kind(), "hf-bpe");
  EXPECT_EQ(tokenizer->end_of_text(), 258);
  // Llama 3's split keeps "(abc" whole, where GPT-2's would cut "(" off.
  EXPECT_EQ(tokenizer->encode("(abc 12345"),
            (std::vector<int32_t>{'(', 257, ' ', '1', '2', '3', '4', '5'}));
  EXPECT_EQ(tokenizer->decode(std::vector<int32_t>{257, 258}), "abc<|endoftext|>");
}

TEST(HfTokenizerFile, WhatItCannotReadIsRefusedByName) {
  EXPECT_ERROR(parse_hf_tokenizer("nope", "t.json"), "t.json", "JSON");
  EXPECT_ERROR(parse_hf_tokenizer("{}", "t.json"), "t.json", "not a Hugging Face");
  EXPECT_ERROR(
      parse_hf_tokenizer(hf_json(kGpt2Split, R"(, "normalizer": {"type": "NFC"})"), "t.json"),
      "t.json", "normalizer", "NFC");
  EXPECT_ERROR(parse_hf_tokenizer(hf_json(kGpt2Split, "", R"(, "byte_fallback": true)"), "t.json"),
               "t.json", "model.byte_fallback");
  EXPECT_ERROR(parse_hf_tokenizer(hf_json(kGpt2Split, "", R"(, "dropout": 0.1)"), "t.json"),
               "t.json", "model.dropout");
  EXPECT_ERROR(parse_hf_tokenizer(hf_json(R"({"type": "Metaspace"})"), "t.json"), "t.json",
               "pre_tokenizer", "Metaspace");
  std::string other_split = kLlama3Split;
  other_split.replace(other_split.find("\\p{N}{1,3}"), 11, "\\p{N}+");
  EXPECT_ERROR(parse_hf_tokenizer(hf_json(other_split), "t.json"), "t.json", "does not implement");
  std::string bad_merge = hf_json(kGpt2Split);
  bad_merge.replace(bad_merge.find("[\"ab\", \"c\"]"), 11, "[\"ab\", \"zz\"]");
  EXPECT_ERROR(parse_hf_tokenizer(bad_merge, "t.json"), "t.json: model.merges[1]", "\"zz\"");
  std::string wordpiece = hf_json(kGpt2Split);
  wordpiece.replace(wordpiece.find("\"BPE\""), 5, "\"WordPiece\"");
  EXPECT_ERROR(parse_hf_tokenizer(wordpiece, "t.json"), "t.json", "model.type", "WordPiece");
  std::string moved = hf_json(kGpt2Split);
  moved.replace(moved.find("\"id\": 258"), 9, "\"id\": 300");
  EXPECT_ERROR(parse_hf_tokenizer(moved, "t.json"), "t.json", "<|endoftext|>", "300");
}

// A vocabulary written as tokenizer.json reads back the same, in either split; bytes too.
TEST(HfTokenizerFile, WrittenVocabulariesReadBackTheSame) {
  for (const std::string& split : {kGpt2Split, kLlama3Split}) {
    const BpeVocab vocab = parse_hf_tokenizer(hf_json(split), "t.json");
    const BpeVocab again = parse_hf_tokenizer(format_hf_tokenizer(vocab), "again.json");
    EXPECT_EQ(again.tokens, vocab.tokens);
    EXPECT_EQ(again.special_tokens, vocab.special_tokens);
    EXPECT_EQ(again.pattern, vocab.pattern);
    ASSERT_EQ(again.merges.size(), vocab.merges.size());
    for (size_t i = 0; i < vocab.merges.size(); ++i) {
      EXPECT_EQ(again.merges[i].result, vocab.merges[i].result);
      EXPECT_EQ(again.merges[i].rank, vocab.merges[i].rank);
    }
  }
  testing::TempDir dir("hf-bytes");
  write_hf_tokenizer_files(read_bpe_vocab("byte"), 64, dir.path());
  const std::unique_ptr<Tokenizer> bytes = load_tokenizer(dir.path().string());
  const std::string text = "caf\xc3\xa9 \xff\x00 it's 2024\n"s;
  std::vector<int32_t> expected;
  for (const unsigned char c : text) expected.push_back(c);
  EXPECT_EQ(bytes->encode(text), expected);
  EXPECT_EQ(bytes->end_of_text(), std::nullopt);
  const nlohmann::json config =
      nlohmann::json::parse(testing::read_all(dir / "tokenizer_config.json"));
  EXPECT_EQ(config["model_max_length"], 64);
}

// A model folder without tokenizer files holds none; one with half of a format is an error,
// never taken for a folder without one.
TEST(LoadTokenizer, HoldsTokenizerTellsNoneFromIncomplete) {
  testing::TempDir dir("tokenizer-holds");
  testing::write_file(dir / "config.json", "{}");
  EXPECT_FALSE(holds_tokenizer(dir.path()));
  testing::write_file(dir / "vocab.json", "{}");
  EXPECT_ERROR(holds_tokenizer(dir.path()), "needs both vocab.json and merges.txt");
  testing::write_file(dir / "merges.txt", "");
  EXPECT_TRUE(holds_tokenizer(dir.path()));
}

TEST(LoadTokenizer, NonUtf8PathIsQuotedPrintably) {
  testing::TempDir dir("tokenizer-bytes");
  const std::string odd = dir / "tok\xff\xfe";
  EXPECT_ERROR(load_tokenizer(odd), "tok\\xff\\xfe", "no such tokenizer directory");
  fs::create_directories(odd);
  EXPECT_ERROR(load_tokenizer(odd), "tok\\xff\\xfe", "no tokenizer found");
}

}  // namespace
}  // namespace tessera::tokenizer
