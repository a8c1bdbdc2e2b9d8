// `tessera serve` on Hugging Face model folders as Transformers lays them out
// (tests/reference/write_hf_folder.py: GPT-2, Llama with grouped-query attention, Mixtral in two
// shards), each with a tokenizer.json and a real model's chat template, answering the official
// OpenAI client with the chat prompt rendered as the template says. The checks live in
// tests/serve/openai_client/chat_template_check.mjs; scripts/setup.sh --test installs the client
// and the reference renderer and tokenizer.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/e2e/cli_runner.h"
#include "tests/e2e/server_process.h"

namespace tessera::testing {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = TESSERA_SOURCE_DIR;
const fs::path kTemplates = kSource / "tests/serve/chat_templates";

struct Case {
  std::string arch;
  std::string chat_template;         // the folder's
  std::string served_template = "";  // given with --chat-template instead, when set
};
void PrintTo(const Case& c, std::ostream* out) { *out << c.arch << " with " << c.chat_template; }

class ServeHfChat : public ::testing::TestWithParam<Case> {};

TEST_P(ServeHfChat, AnswersWithTheFoldersChatTemplate) {
  if (!fs::exists(kOpenAiClientDir / "node_modules/@huggingface/tokenizers")) {
    GTEST_SKIP() << kOpenAiClientDir / "node_modules"
                 << " is incomplete: run scripts/setup.sh --test";
  }
  const Case& c = GetParam();
  TempDir dir("serve-hf-chat-" + c.arch);
  const CliResult written =
      run_command("/usr/bin/python3 '" + (kSource / "tests/reference/write_hf_folder.py").string() +
                  "' --arch " + c.arch + " --template '" + (kTemplates / c.chat_template).string() +
                  "' --out " + (dir / "hf"));
  ASSERT_EQ(written.exit_code, 0) << written.output;

  const std::string served_template =
      c.served_template.empty() ? "" : (kTemplates / c.served_template).string();
  ServerProcess server("--checkpoint " + (dir / "hf") +
                       " --api-key chat-key --model-name hf-model --threads 1" +
                       (served_template.empty() ? "" : " --chat-template " + served_template));
  EXPECT_NE(server.output().find("the model's chat template"), std::string::npos)
      << server.output();
  const CliResult check =
      run_command("node '" + (kOpenAiClientDir / "chat_template_check.mjs").string() +
                  "' http://127.0.0.1:" + std::to_string(server.port()) + "/v1 chat-key hf-model " +
                  (dir / "hf") + " " + served_template);
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n--- server ---\n" << server.output();
  EXPECT_EQ(checks_passed(check.output), 4u) << check.output;
}

INSTANTIATE_TEST_SUITE_P(
    Architectures, ServeHfChat,
    ::testing::Values(Case{"gpt2", "Qwen-Qwen2.5-7B-Instruct.jinja"},
                      Case{"llama", "meta-llama-Meta-Llama-3-8B-Instruct.jinja"},
                      Case{"mixtral", "mistralai-Mixtral-8x7B-Instruct-v0.1.jinja"},
                      Case{"gpt2", "Qwen-Qwen2.5-7B-Instruct.jinja",
                           "HuggingFaceH4-zephyr-7b-beta.jinja"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return info.param.arch + (info.param.served_template.empty() ? "" : "_chat_template_flag");
    });

}  // namespace
}  // namespace tessera::testing
