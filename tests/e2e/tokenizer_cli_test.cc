// `tessera tokenizer train|encode|decode` as a user runs them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace tessera::testing
