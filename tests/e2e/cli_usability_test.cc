// What a new user tries first: help on every command, the version, a Hugging Face folder given
// where a run is expected, and a run's saved config run again from another folder.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <httplib.h>

#include "tests/e2e/cli_runner.h"
#include "tests/e2e/server_process.h"

namespace tessera::testing {
namespace {

const std::vector<std::string> kCommands = {
    "prepare",        "train",          "generate",         "serve",          "plan",
    "supervise",      "report",         "tokenizer train",  "tokenizer encode", "tokenizer decode",
    "convert export", "convert import"};

TEST(CliUsability, EveryCommandAnswersDashHAndHelp) {
  for (const std::string& command : kCommands) {
    for (const std::string flag : {"-h", "--help"}) {
      const CliResult r = run_cli(command + " " + flag);
      EXPECT_EQ(r.exit_code, 0) << command << " " << flag << ": " << r.output;
      EXPECT_EQ(r.output.rfind("usage: tessera " + command, 0), 0u) << r.output;
      EXPECT_NE(r.output.find("--help"), std::string::npos) << r.output;
    }
  }
  for (const std::string group : {"", "tokenizer ", "convert "}) {
    const CliResult r = run_cli(group + "-h");
    EXPECT_EQ(r.exit_code, 0) << group << r.output;
    EXPECT_EQ(r.output.rfind("usage: tessera", 0), 0u) << r.output;
  }
}

TEST(CliUsability, HelpNamesEveryArchitecture) {
  for (const std::string args : {"--help", "train --help"}) {
    const CliResult r = run_cli(args);
    for (const std::string name : {"GPT-2", "Llama", "mixture-of-experts"}) {
      EXPECT_NE(r.output.find(name), std::string::npos) << args << " lacks " << name << r.output;
    }
  }
}

TEST(CliUsability, VersionNamesTheBuildTheCpuAndTheBackends) {
  const CliResult r = run_cli("--version");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("tessera ", 0), 0u) << r.output;
  for (const std::string line : {"compiled for:", "this CPU:", "matmuls:", "CUDA:"}) {
    EXPECT_NE(r.output.find(line), std::string::npos) << line << " missing: " << r.output;
  }
#ifdef __AVX512F__
  EXPECT_NE(r.output.substr(0, r.output.find("this CPU:")).find("avx512f"), std::string::npos)
      << r.output;
#endif
}

// generate and serve read a Hugging Face folder in place; a command that needs a run says how to
// import one.
TEST(CliUsability, AHuggingFaceFolderServesInPlace) {
  const TempDir dir("tessera-hf-in-place");
  write_file(dir / "corpus.txt", small_corpus());
  ASSERT_EQ(run_cli("train --data " + (dir / "corpus.txt") + " --out " + (dir / "run") +
                    kSmallModel + " --set train.steps=3")
                .exit_code,
            0);
  ASSERT_EQ(
      run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf")).exit_code,
      0);
  const std::string greedy = " --prompt 'In the' --max-tokens 24 --temperature 0";
  const CliResult from_run = run_cli("generate --checkpoint " + (dir / "run") + greedy);
  const CliResult from_hf = run_cli("generate --checkpoint " + (dir / "hf") + greedy);
  ASSERT_EQ(from_run.exit_code, 0) << from_run.output;
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.output;
  // The prompt and the continuation, then a line break.
  const std::string text = from_run.output.substr(from_run.output.find("In the"));
  EXPECT_EQ(from_hf.output.substr(from_hf.output.find("In the")), text);
  // The export carries the byte-level tokenizer as a tokenizer.json.
  EXPECT_EQ(from_hf.output.find("no tokenizer"), std::string::npos) << from_hf.output;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "hf" / "tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "hf" / "generation_config.json"));
  {
    ServerProcess server("--checkpoint " + (dir / "hf"));
    httplib::Client client("127.0.0.1", server.port());
    const auto reply = client.Post(
        "/v1/completions",
        R"({"model": "hf", "prompt": "In the", "max_tokens": 24, "temperature": 0})",
        "application/json");
    ASSERT_TRUE(reply) << server.output();
    ASSERT_EQ(reply->status, 200) << reply->body;
    EXPECT_EQ("In the" + nlohmann::json::parse(reply->body)["choices"][0]["text"].get<std::string>(),
              text.substr(0, text.size() - 1));
  }

  const CliResult r = run_cli("convert export --checkpoint " + (dir / "hf") + " --out " +
                              (dir / "again"));
  expect_one_line_error(r, "a Hugging Face model folder");
  EXPECT_NE(r.output.find("tessera convert import --hf " + (dir / "hf")), std::string::npos)
      << r.output;
}

// A run trained with its own BPE vocabulary exports it as tokenizer.json: the folder encodes as
// the run does, and continues a prompt as the run does.
TEST(CliUsability, AnExportCarriesItsBpeTokenizer) {
  const TempDir dir("tessera-export-tokenizer");
  write_file(dir / "corpus.txt", small_corpus());
  ASSERT_EQ(run_cli("tokenizer train --vocab-size 300 --out " + (dir / "tok") + " " +
                    (dir / "corpus.txt"))
                .exit_code,
            0);
  ASSERT_EQ(run_cli("train --data " + (dir / "corpus.txt") + " --tokenizer " + (dir / "tok") +
                    " --out " + (dir / "run") + kSmallModel +
                    " --set train.steps=3 --set model.vocab_size=300")
                .exit_code,
            0);
  const CliResult exported =
      run_cli("convert export --checkpoint " + (dir / "run") + " --out " + (dir / "hf"));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  const std::string ids_of = " < " + (dir / "corpus.txt");
  const CliResult run_ids = run_cli("tokenizer encode --tokenizer " + (dir / "run/tokenizer") + ids_of);
  const CliResult hf_ids = run_cli("tokenizer encode --tokenizer " + (dir / "hf") + ids_of);
  ASSERT_EQ(run_ids.exit_code, 0) << run_ids.output;
  EXPECT_EQ(hf_ids.output, run_ids.output);
  const nlohmann::json generation =
      nlohmann::json::parse(read_all(dir / "hf/generation_config.json"));
  const CliResult eos = run_command("echo " + generation["eos_token_id"].dump() + " | " +
                                    TESSERA_BINARY + " tokenizer decode --tokenizer " + (dir / "hf"));
  EXPECT_EQ(eos.output, "<|endoftext|>");
  const std::string greedy = " --prompt 'In the' --max-tokens 16 --temperature 0";
  const CliResult from_run = run_cli("generate --checkpoint " + (dir / "run") + greedy);
  const CliResult from_hf = run_cli("generate --checkpoint " + (dir / "hf") + greedy);
  ASSERT_EQ(from_hf.exit_code, 0) << from_hf.output;
  EXPECT_EQ(from_hf.output.substr(from_hf.output.find("In the")),
            from_run.output.substr(from_run.output.find("In the")));
}

// A saved config.toml names its data by absolute path, so it runs again from any folder.
TEST(CliUsability, ASavedConfigRunsAgainFromAnotherFolder) {
  const TempDir dir("tessera-saved-config");
  std::filesystem::create_directories(dir.path() / "project" / "text");
  std::filesystem::create_directories(dir.path() / "elsewhere");
  write_file(dir / "project/text/corpus.txt", small_corpus());
  const CliResult first = run_command("cd " + (dir / "project") + " && " + TESSERA_BINARY +
                                      " train --data text/corpus.txt --out runs/a" + kSmallModel +
                                      " --set train.steps=1");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string saved = read_all(dir / "project/runs/a/config.toml");
  EXPECT_NE(saved.find("path = \"" + (dir / "project/text/corpus.txt") + "\""), std::string::npos)
      << saved;
  const CliResult again =
      run_command("cd " + (dir / "elsewhere") + " && " + TESSERA_BINARY +
                  " train --config ../project/runs/a/config.toml --out runs/b");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(training_losses(dir / "elsewhere/runs/b"), training_losses(dir / "project/runs/a"));
}

}  // namespace
}  // namespace tessera::testing
