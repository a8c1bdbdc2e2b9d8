// `tessera tokenizer train|encode|decode` as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tessera/tokenizer/gpt2_vocab_files.h"
#include "tessera/tokenizer/llama3_pretokenizer.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

using namespace std::string_literals;

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class TokenizerCli : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file(dir_ / "corpus.txt", small_corpus());
    const CliResult r = run_cli("tokenizer train --vocab-size 280 --out " + (dir_ / "tok") + " " +
                                (dir_ / "corpus.txt"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_NE(r.output.find("trained 280 tokens"), std::string::npos) << r.output;
  }

  TempDir dir_{"tokenizer-cli"};
};

TEST_F(TokenizerCli, TrainEncodeDecodeRoundTripsAnyBytes) {
  EXPECT_TRUE(std::filesystem::exists(dir_ / "tok/tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "tok/ranks.tiktoken"));
  const std::string text = "In the beginning\0 \xff\xfe caf\xc3\xa9 \xe4\xb8\x96\n"s;
  write_file(dir_ / "input.bin", text);
  const std::string tok = " --tokenizer " + (dir_ / "tok");
  CliResult encoded =
      run_cli("tokenizer encode" + tok + " < " + (dir_ / "input.bin") + " > " + (dir_ / "ids.txt"));
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  const std::string ids = read_bytes(dir_ / "ids.txt");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), '\n'), 1) << ids;
  EXPECT_LT(std::count(ids.begin(), ids.end(), ' ') + 1, int64_t(text.size())) << ids;
  CliResult decoded = run_cli("tokenizer decode" + tok + " < " + (dir_ / "ids.txt") + " > " +
                              (dir_ / "output.bin"));
  ASSERT_EQ(decoded.exit_code, 0) << decoded.output;
  EXPECT_EQ(read_bytes(dir_ / "output.bin"), text);

  // --json prints the same ids as an array, and decode reads that form too.
  CliResult json = run_cli("tokenizer encode --json" + tok + " < " + (dir_ / "input.bin"));
  ASSERT_EQ(json.exit_code, 0) << json.output;
  std::string spaced;
  for (int id : nlohmann::json::parse(json.output)) spaced += std::to_string(id) + " ";
  EXPECT_EQ(spaced, ids.substr(0, ids.size() - 1) + " ");
  write_file(dir_ / "ids.json", json.output);
  CliResult from_json = run_cli("tokenizer decode" + tok + " < " + (dir_ / "ids.json"));
  EXPECT_EQ(from_json.output, text);
}

TEST_F(TokenizerCli, BadInputsEndInOneLineErrors) {
  const std::string tok = " --tokenizer " + (dir_ / "tok");
  expect_one_line_error(run_cli("tokenizer encode < /dev/null"), "--tokenizer DIR is required");
  expect_one_line_error(
      run_cli("tokenizer encode --tokenizer " + (dir_ / "nowhere") + " < /dev/null"),
      "no such tokenizer directory");
  expect_one_line_error(
      run_cli("tokenizer encode --tokenizer " + dir_.path().string() + " < /dev/null"),
      "no tokenizer found");
  expect_one_line_error(
      run_cli("tokenizer encode --tokenizer \"$(printf '/tmp/\\377\\376')\" < /dev/null"),
      "/tmp/\\xff\\xfe: no such tokenizer directory");
  write_file(dir_ / "bad_ids.txt", "12 300 4\n");
  expect_one_line_error(run_cli("tokenizer decode" + tok + " < " + (dir_ / "bad_ids.txt")),
                        "token id 300 at position 1");
  write_file(dir_ / "bad_ids.txt", "12 x7\n");
  expect_one_line_error(run_cli("tokenizer decode" + tok + " < " + (dir_ / "bad_ids.txt")),
                        "\"x7\" is not a token id");
  expect_one_line_error(run_cli("tokenizer train --vocab-size 100 --out " + (dir_ / "t2") + " " +
                                (dir_ / "corpus.txt")),
                        "vocabulary size 100");
  expect_one_line_error(run_cli("tokenizer train --vocab-size 300 --out " + (dir_ / "t2")),
                        "at least one FILE");
  expect_one_line_error(run_cli("tokenizer train --vocab-size 300 --out " + (dir_ / "t2") + " " +
                                (dir_ / "missing.txt")),
                        "missing.txt");
  write_file(dir_ / "tok/ranks.tiktoken", "YQ== 0\nnot-base64 1\n");
  expect_one_line_error(run_cli("tokenizer encode" + tok + " < /dev/null"), "ranks.tiktoken:2:");
  const CliResult unknown = run_cli("tokenizer frobnicate");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_NE(unknown.output.find("unknown subcommand 'frobnicate'"), std::string::npos);
}

// A Hugging Face tokenizer.json in Llama 3's style (every byte, the merges "a b" and "ab c", its
// split and its special tokens) encodes from the command line and trains a model, whose run folder
// keeps a checked copy of it.
TEST(HfTokenizerCli, ALlama3StyleTokenizerJsonEncodesAndTrains) {
  const TempDir dir("hf-tokenizer-cli");
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[tokenizer::map_gpt2_bytes(std::string(1, char(b)))] = b;
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  const nlohmann::json tokenizer = {
      {"added_tokens",
       {{{"id", 258}, {"content", "<|begin_of_text|>"}, {"special", true}},
        {{"id", 259}, {"content", "<|end_of_text|>"}, {"special", true}}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", tokenizer::kLlama3Pattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b", "ab c"}}}}};
  std::filesystem::create_directories(dir.path() / "tok");
  write_file(dir / "tok/tokenizer.json", tokenizer.dump());
  write_file(dir / "text.txt", "(abc 1234");
  const CliResult encoded =
      run_cli("tokenizer encode --tokenizer " + (dir / "tok") + " < " + (dir / "text.txt"));
  ASSERT_EQ(encoded.exit_code, 0) << encoded.output;
  EXPECT_EQ(encoded.output, "40 257 32 49 50 51 52\n");

  std::string corpus;
  for (int i = 0; i < 300; ++i) corpus += "abc (abc) cab " + std::to_string(i) + "\n";
  write_file(dir / "corpus.txt", corpus);
  const CliResult trained =
      run_cli("train --data " + (dir / "corpus.txt") + " --tokenizer " + (dir / "tok") + " --out " +
              (dir / "run") + kSmallModel + " --set train.steps=2 --set model.vocab_size=260");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "run/tokenizer/tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "run/tokenizer/digests.json"));

  write_file(dir / "tok/tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_one_line_error(
      run_cli("tokenizer encode --tokenizer " + (dir / "tok") + " < " + (dir / "text.txt")),
      "tokenizer.json: model.type = \"Unigram\" is not supported");
}

}  // namespace
}  // namespace tessera::testing
