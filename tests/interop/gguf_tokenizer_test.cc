// A GGUF file's tokenizer settings as serving reads them in place: the chat template and the
// texts of the bos and eos tokens, and an id outside the vocabulary refused by name.
#include "tessera/interop/gguf_tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/expect_error.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;

// Writes `w` and reads it back.
GgufFile written(const GgufWriter& w) {
  const fs::path path = fs::temp_directory_path() / ("gguf-tokenizer-" + std::to_string(getpid()));
  w.write(path);
  GgufFile f(path);
  fs::remove(path);  // mapped: the mapping outlives the name
  return f;
}

TEST(GgufTokenizerConfig, HoldsTheChatTemplateAndTheTextsOfBosAndEos) {
  GgufWriter w;
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"<s>", "a", "</s>"});
  w.set("tokenizer.ggml.bos_token_id", uint32_t(0));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(2));
  w.set("tokenizer.chat_template", std::string("{{ bos_token }}{{ messages[0]['content'] }}"));
  const nlohmann::json config = gguf_tokenizer_config(written(w));
  EXPECT_EQ(config["bos_token"], "<s>");
  EXPECT_EQ(config["eos_token"], "</s>");
  EXPECT_EQ(config["chat_template"], "{{ bos_token }}{{ messages[0]['content'] }}");
}

TEST(GgufTokenizerConfig, IsEmptyWithoutATokenizerAndRefusesAnIdOutsideTheVocabulary) {
  EXPECT_TRUE(gguf_tokenizer_config(written(GgufWriter())).empty());
  GgufWriter w;
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
  w.set("tokenizer.ggml.eos_token_id", uint32_t(7));
  const GgufFile f = written(w);
  testing::expect_error([&] { gguf_tokenizer_config(f); },
                        {"tokenizer.ggml.eos_token_id is 7", "outside the 2 tokens"});
}

}  // namespace
}  // namespace tessera::interop
