// Chat data: JSONL examples rendered through a chat template into tokens and a loss mask that
// trains on the assistant's turns, and the datasets prepare writes from them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/targets.h"
#include "tessera/data/chat_examples.h"
#include "tessera/data/dataset.h"
#include "tessera/data/prepare.h"
#include "tessera/data/windows.h"
#include "tests/data/byte_special_tokenizer.h"

namespace fs = std::filesystem;

namespace tessera::data {
namespace {

// ChatML, as Qwen's and many other models' templates write it.
constexpr char kChatMl[] =
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

const testing::ByteSpecialTokenizer& tokenizer() {
  static const testing::ByteSpecialTokenizer t({"<|im_start|>", "<|im_end|>"});
  return t;
}

const jinja::ChatTemplate& chatml() {
  static const jinja::ChatTemplate t(kChatMl, "", "<|endoftext|>");
  return t;
}

// The example's text, and the text of its trained tokens.
std::pair<std::string, std::string> texts(const ChatExample& e) {
  std::string all, trained;
  for (size_t i = 0; i < e.tokens.size(); ++i) {
    const std::string piece = tokenizer().decode(std::span(&e.tokens[i], 1));
    all += piece;
    if (e.trained[i] != 0) trained += piece;
  }
  return {all, trained};
}

std::string error_of(std::string_view line, const jinja::ChatTemplate& t = chatml()) {
  try {
    encode_chat_example(line, t, tokenizer(), ChatLoss::kAssistant);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatExamples, TrainOnTheAssistantTurnsOnly) {
  const ChatExample e = encode_chat_example(
      R"({"messages": [{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Hi?"},
                       {"role": "assistant", "content": "Hello."},
                       {"role": "user", "content": "Bye?"},
                       {"role": "assistant", "content": "Bye."}]})",
      chatml(), tokenizer(), ChatLoss::kAssistant);
  const auto [all, trained] = texts(e);
  EXPECT_EQ(all,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi?<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye?<|im_end|>\n"
            "<|im_start|>assistant\nBye.<|im_end|>\n");
  EXPECT_EQ(trained, "Hello.<|im_end|>\nBye.<|im_end|>\n");
  EXPECT_EQ(e.bytes, int64_t(all.size()));
  // The special tokens are single tokens.
  EXPECT_EQ(e.tokens.front(), 257);

  const ChatExample everything =
      encode_chat_example(R"({"messages": [{"role": "user", "content": "Q"},
                                           {"role": "assistant", "content": "A"}]})",
                          chatml(), tokenizer(), ChatLoss::kAll);
  EXPECT_EQ(texts(everything).first, texts(everything).second);
}

TEST(ChatExamples, PromptsAndCompletionsAsTextOrAsMessages) {
  const ChatExample plain = encode_chat_example(R"({"prompt": "2+2=", "completion": "4"})",
                                                chatml(), tokenizer(), ChatLoss::kAssistant);
  EXPECT_EQ(texts(plain), std::make_pair(std::string("2+2=4"), std::string("4")));

  const ChatExample listed = encode_chat_example(
      R"({"prompt": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                     {"role": "user", "content": "c"}],
          "completion": [{"role": "assistant", "content": "d"}]})",
      chatml(), tokenizer(), ChatLoss::kAssistant);
  EXPECT_EQ(texts(listed).second, "d<|im_end|>\n");
}

TEST(ChatExamples, BadLinesAreNamed) {
  EXPECT_NE(error_of("{\"messages\": [").find("not JSON"), std::string::npos);
  EXPECT_NE(error_of("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error_of(std::string(100, '[')).find("deeper than 32"), std::string::npos);
  EXPECT_NE(error_of(R"({"text": "x"})").find("neither \"messages\""), std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "robot", "content": "x"}]})")
                .find("messages[0]: \"role\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": 3}]})").find("\"content\""),
            std::string::npos);
  EXPECT_NE(
      error_of(R"({"messages": [{"role": "user", "content": "x"}]})").find("no assistant turn"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "x", "completion": ""})").find("empty"), std::string::npos);
  // A template that marks the last message renders no turn as a continuation of the others.
  const jinja::ChatTemplate marks_last(
      "{% for m in messages %}{% if loop.last %}LAST {% endif %}{{ m['content'] }}\n{% endfor %}",
      "", "");
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": "x"},
                                      {"role": "assistant", "content": "y"}]})",
                     marks_last)
                .find("continuation"),
            std::string::npos);
}

class PrepareChatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("tessera_prepare_chat_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  PrepareOptions options(const std::string& jsonl) {
    std::ofstream(root_ / "chat.jsonl", std::ios::binary) << jsonl;
    PrepareOptions o;
    o.inputs = {root_ / "chat.jsonl"};
    o.out_dir = root_ / "ds";
    o.val_fraction = 0.25;
    return o;
  }
  fs::path root_;
};

std::string example_line(int i) {
  return R"({"messages": [{"role": "user", "content": "q)" + std::to_string(i) +
         R"("}, {"role": "assistant", "content": "a)" + std::to_string(i) + R"("}]})";
}

// Each example is a document ended by an untrained end-of-text token; the last quarter of the
// examples is held out; training windows ignore every target outside the assistants' turns.
TEST_F(PrepareChatTest, ExamplesBecomeMaskedDocuments) {
  std::string jsonl;
  for (int i = 0; i < 8; ++i) jsonl += example_line(i) + (i == 3 ? "\n\n" : "\n");
  const DatasetManifest m =
      prepare_chat_dataset(tokenizer(), "test", chatml(), ChatLoss::kAssistant, options(jsonl));
  const Dataset d = open_dataset(root_ / "ds");
  std::vector<int32_t> tokens(d.train.size()), targets(d.train.size());
  d.train.copy(0, d.train.size(), tokens.data());
  d.train.copy(0, d.train.size(), targets.data());
  d.train.mark_untrained(0, d.train.size(), targets.data());
  std::string text, trained;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string piece = tokenizer().decode(std::span(&tokens[i], 1));
    text += piece;
    if (targets[i] != kIgnoredTarget) trained += piece;
  }
  std::string want_text, want_trained;
  for (int i = 0; i < 6; ++i) {
    if (i > 0) want_text += "<|endoftext|>";
    want_text += "<|im_start|>user\nq" + std::to_string(i) +
                 "<|im_end|>\n<|im_start|>assistant\na" + std::to_string(i) + "<|im_end|>\n";
    want_trained += "a" + std::to_string(i) + "<|im_end|>\n";
  }
  EXPECT_EQ(text, want_text);
  EXPECT_EQ(trained, want_trained);
  EXPECT_EQ(m.train.tokens, d.train.size());
  // The bytes are the rendered examples', without the separators.
  EXPECT_EQ(m.train.bytes, int64_t(want_text.size() - 5 * std::string("<|endoftext|>").size()));
  std::vector<int32_t> val(d.val.size());
  d.val.copy(0, d.val.size(), val.data());
  std::string val_text;
  for (const int32_t t : val) val_text += tokenizer().decode(std::span(&t, 1));
  EXPECT_EQ(val_text.find("<|im_start|>user\nq6"), 0u) << val_text;
  EXPECT_NE(val_text.find("<|endoftext|><|im_start|>user\nq7"), std::string::npos);
}

TEST_F(PrepareChatTest, ABadLineIsNamedByFileAndNumber) {
  const std::string jsonl = example_line(0) + "\n" + example_line(1) + "\n{\"messages\": 5}\n";
  try {
    prepare_chat_dataset(tokenizer(), "test", chatml(), ChatLoss::kAssistant, options(jsonl));
    FAIL() << "a bad line was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chat.jsonl:3: \"messages\" must be a non-empty list"),
              std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(root_ / "ds" / kDatasetManifestFile));
}

}  // namespace
}  // namespace tessera::data
