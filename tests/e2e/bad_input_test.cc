#include <gtest/gtest.h>

#include <fstream>

#include "tests/e2e/cli_runner.h"

namespace tessera::testing {
namespace {

class BadInput : public ::testing::Test {
 protected:
  TempDir dir{"tessera-bad-input"};
};

TEST_F(BadInput, ConfigMissingARequiredKey) {
  write_file(dir / "c.toml", "[model]\nvocab_size = 256\nn_head = 4\nd_model = 64\nmax_seq = 64\n");
  expect_one_line_error(run_cli("train --config " + (dir / "c.toml")), "model.n_layer");
}

TEST_F(BadInput, MalformedConfigValue) {
  write_file(dir / "c.toml",
             "[model]\nvocab_size = 256\nn_layer = 2\nn_head = 4\nd_model = 64\nmax_seq = 64\n"
             "[train]\nsteps = \"many\"\n");
  expect_one_line_error(run_cli("train --config " + (dir / "c.toml")), "train.steps");
}

TEST_F(BadInput, ConfigSyntaxError) {
  write_file(dir / "c.toml", "[model\nn_layer = 2\n");
  expect_one_line_error(run_cli("train --config " + (dir / "c.toml")), "c.toml");
}

TEST_F(BadInput, UnknownSetKey) {
  expect_one_line_error(run_cli("train --set train.lerning_rate=1"), "train.lerning_rate");
}

TEST_F(BadInput, UnknownFlag) { expect_one_line_error(run_cli("train --epochs 3"), "--epochs"); }

TEST_F(BadInput, ChatDataWithoutAChatTemplateOrMode) {
  write_file(dir / "chat.jsonl", R"({"prompt": "a", "completion": "b"})" "\n");
  const std::string out = " --out " + (dir / "ds") + " " + (dir / "chat.jsonl");
  expect_one_line_error(run_cli("prepare --chat-template " + (dir / "x.jinja") + out), "--chat");
  expect_one_line_error(run_cli("prepare --chat" + out), "no chat template");
  write_file(dir / "bad.jinja", "{% for m in messages %}");
  expect_one_line_error(run_cli("prepare --chat --chat-template " + (dir / "bad.jinja") + out),
                        "bad.jinja");
  expect_one_line_error(run_cli("prepare --chat --chat-loss prompts" + out), "--chat-loss");
}

TEST_F(BadInput, EmptyCorpus) {
  write_file(dir / "empty.txt", "");
  expect_one_line_error(run_cli("train --data " + (dir / "empty.txt")), "empty");
}

TEST_F(BadInput, MissingCorpus) {
  expect_one_line_error(run_cli("train --data " + (dir / "nope.txt")), "nope.txt");
}

class BadCheckpoint : public BadInput {
 protected:
  void SetUp() override {
    std::string text;
    for (int i = 0; i < 200; ++i) text += "a small corpus line " + std::to_string(i) + "\n";
    write_file(dir / "corpus.txt", text);
    CliResult r = run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / "run") +
                          " --set model.n_layer=1 --set model.n_head=2 --set model.d_model=16"
                          " --set model.max_seq=16 --set train.batch_size=2"
                          " --set train.seq_len=16 --set train.steps=2 --set train.eval_every=0"
                          " --set train.eval_batches=1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    step = dir / "run/checkpoints/step-000002";
  }
  std::string step;
};

TEST_F(BadCheckpoint, FlippedByteIsDetected) {
  {
    std::fstream f(step + "/rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c;
    f.get(c);
    f.seekp(100);
    f.put(char(c ^ 0x20));
  }
  expect_one_line_error(run_cli("generate --checkpoint " + (dir / "run") + " --prompt hi"),
                        "checksum");
}

TEST_F(BadCheckpoint, MissingCommitMarkerIsRefused) {
  std::filesystem::remove(step + "/COMMIT");
  expect_one_line_error(run_cli("generate --checkpoint " + step + " --prompt hi"), "COMMIT");
}

TEST_F(BadCheckpoint, PromptLongerThanTheContext) {
  expect_one_line_error(
      run_cli("generate --checkpoint " + (dir / "run") + " --prompt " + std::string(17, 'x')),
      "context");
}

TEST_F(BadCheckpoint, BadSamplingFlag) {
  expect_one_line_error(
      run_cli("generate --checkpoint " + (dir / "run") + " --prompt hi --top-p 0"), "--top-p");
}

}  // namespace
}  // namespace tessera::testing
