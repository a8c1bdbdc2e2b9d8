#include "tessera/tokenizer/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/threading.h"
#include "tessera/tokenizer/bpe_trainer.h"
#include "tessera/tokenizer/tessera_tokenizer_files.h"
#include "tests/e2e/cli_runner.h"

namespace tessera::tokenizer {
namespace {

using namespace std::string_literals;

using Ids = std::vector<int32_t>;

// Text with a Zipf-like distribution over a few thousand made-up words, so merges have
// something to find long after the first few hundred.
std::string corpus(size_t bytes, uint64_t seed) {
  const std::vector<std::string> syllables = {
      "th",  "e",     "an",    "d",           "ing",          "re",           "o",
      "u",   "ch",    "st",    "al",          "is",           "er",           "y",
      "k",   "don't", "we'll", "caf\xc3\xa9", "\xe4\xb8\x96", "\xe7\x95\x8c", "20",
      "3.1", "qu",    "x"};
  std::mt19937_64 word_rng(99);
  std::vector<std::string> words(3000);
  for (std::string& word : words) {
    for (int n = 1 + int(word_rng() % 4); n > 0; --n)
      word += syllables[word_rng() % syllables.size()];
  }
  std::mt19937_64 rng(seed);
  std::string text;
  while (text.size() < bytes) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    text += words[size_t(u * u * u * words.size())];
    const uint64_t r = rng() % 20;
    text += r == 0 ? ".\n" : r == 1 ? ", " : r == 2 ? "  " : " ";
  }
  return text;
}

BpeTokenizer trained(int64_t vocab_size = 600) {
  const std::string text = corpus(200000, 1);
  return BpeTokenizer(train_bpe({text}, vocab_size), "tessera-bpe", "test");
}

TEST(BpeTokenizer, SpecialTokensAreRecognisedOnlyWhenAllowed) {
  BpeVocab vocab = train_bpe({corpus(50000, 1)}, 400);
  const int32_t next = int32_t(vocab.tokens.size());
  vocab.special_tokens = {{"<|endoftext|>", next}, {"<|end|>", next + 1}, {"<|end|>x", next + 2}};
  const BpeTokenizer t(std::move(vocab), "tessera-bpe", "test");
  const std::string text = "the end<|endoftext|><|end|>x and<|end|>";
  const Ids plain = t.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), next), 0);
  EXPECT_EQ(t.decode(plain), text);
  Ids expected = t.encode("the end");
  expected.insert(expected.end(), {next, next + 2});  // the longest special token at a place
  const Ids between = t.encode(" and");
  expected.insert(expected.end(), between.begin(), between.end());
  expected.push_back(next + 1);
  EXPECT_EQ(t.encode_allowing_special(text), expected);
  EXPECT_EQ(t.decode(expected), text);
  EXPECT_EQ(t.encode_allowing_special("no markers"), t.encode("no markers"));
  EXPECT_EQ(t.encode_allowing_special(""), Ids{});
}

TEST(BpeTrainer, LearnsTheRequestedVocabularyDeterministically) {
  const std::string text = corpus(200000, 1);
  const BpeVocab a = train_bpe({text}, 600), b = train_bpe({text}, 600);
  EXPECT_EQ(a.tokens, b.tokens);
  ASSERT_EQ(a.tokens.size(), 599u);
  for (int byte = 0; byte < 256; ++byte) EXPECT_EQ(a.tokens[byte], std::string(1, char(byte)));
  ASSERT_EQ(a.special_tokens.size(), 1u);
  EXPECT_EQ(a.special_tokens[0], (std::pair<std::string, int32_t>{"<|endoftext|>", 599}));
  // Each learned token joins two tokens learned before it.
  for (size_t id = 256; id < a.tokens.size(); ++id) {
    const std::string& token = a.tokens[id];
    bool joins_earlier = false;
    for (size_t cut = 1; cut < token.size(); ++cut) {
      const auto left = std::find(a.tokens.begin(), a.tokens.begin() + id, token.substr(0, cut));
      const auto right = std::find(a.tokens.begin(), a.tokens.begin() + id, token.substr(cut));
      joins_earlier |= left != a.tokens.begin() + id && right != a.tokens.begin() + id;
    }
    EXPECT_TRUE(joins_earlier) << "token " << id;
  }
}

TEST(BpeTrainer, StopsWhenNoPairIsLeft) {
  const BpeVocab vocab = train_bpe({"ab ab ab"}, 1000);
  // "ab", " a"... every pair of the three pieces merges until each piece is one token.
  EXPECT_LT(vocab.tokens.size(), 262u);
  EXPECT_EQ(vocab.special_tokens[0].second, int32_t(vocab.tokens.size()));
}

TEST(BpeTrainer, RejectsAVocabularyWithoutRoomForTheBytes) {
  EXPECT_THROW(train_bpe({"text"}, 256), Error);
}

TEST(BpeTokenizer, TrainedVocabularyCompresses) {
  const BpeTokenizer tokenizer = trained();
  const std::string text = corpus(50000, 2);  // unseen text from the same distribution
  const Ids ids = tokenizer.encode(text);
  EXPECT_LT(ids.size() * 5, text.size() * 2)
      << ids.size() << " tokens for " << text.size() << " bytes";
  EXPECT_EQ(tokenizer.decode(ids), text);
  EXPECT_EQ(tokenizer.vocab_size(), 600);
  EXPECT_EQ(tokenizer.end_of_text(), 599);
}

TEST(BpeTokenizer, RoundTripsAnyBytes) {
  const BpeTokenizer tokenizer = trained();
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(all)), all);
  const std::string nasty = "a\0b\xff\xfe\xc3(\x80 caf\xc3\xa9\xed\xa0\x80\xf4\x90\x80\x80 the\0"s;
  EXPECT_EQ(tokenizer.decode(tokenizer.encode(nasty)), nasty);
  EXPECT_TRUE(tokenizer.encode("").empty());
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    std::string bytes(rng() % 300, '\0');
    for (char& c : bytes) c = char(rng() % 4 ? rng() % 128 : rng() % 256);
    ASSERT_EQ(tokenizer.decode(tokenizer.encode(bytes)), bytes) << "trial " << trial;
  }
}

TEST(BpeTokenizer, EndOfTextInTextIsOrdinaryText) {
  const BpeTokenizer tokenizer = trained();
  const Ids ids = tokenizer.encode("a<|endoftext|>b");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 599), 0);
  EXPECT_EQ(tokenizer.decode(Ids{599}), "<|endoftext|>");
}

TEST(BpeTokenizer, LongPiecesEncodeInReasonableTime) {
  const BpeTokenizer tokenizer = trained();
  const std::string run(1 << 20, 'e');  // one 1 MB piece
  const Ids ids = tokenizer.encode(run);
  EXPECT_EQ(tokenizer.decode(ids), run);
}

TEST(BpeTokenizer, ParallelEncodeMatchesOneThread) {
  const BpeTokenizer tokenizer = trained();
  const std::string text = corpus(3 * BpeTokenizer::kParallelMinBytes, 4) + "\xff tail";
  const int threads = num_threads();
  set_num_threads(1);
  const Ids serial = tokenizer.encode(text);
  set_num_threads(3);
  const Ids parallel = tokenizer.encode(text);
  set_num_threads(threads);
  EXPECT_EQ(parallel, serial);
}

TEST(BpeTokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const BpeTokenizer tokenizer = trained();
  for (int32_t bad : {600, -1}) {
    try {
      tokenizer.decode(Ids{65, bad});
      FAIL() << "decode accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(BpeTokenizer, SavedTokenizerLoadsAndEncodesTheSame) {
  const std::string text = corpus(200000, 1);
  const BpeVocab vocab = train_bpe({text}, 600);
  const BpeTokenizer in_memory(vocab, "tessera-bpe", "test");
  testing::TempDir dir("tessera-tokenizer");
  save_tessera_tokenizer(vocab, dir.path() / "tok");
  const auto loaded = load_tokenizer((dir.path() / "tok").string());
  EXPECT_EQ(loaded->kind(), "tessera-bpe");
  EXPECT_EQ(loaded->vocab_size(), 600);
  EXPECT_EQ(loaded->end_of_text(), 599);
  const std::string sample = corpus(20000, 5);
  EXPECT_EQ(loaded->encode(sample), in_memory.encode(sample));
}

TEST(ByteTokenizer, LoadsByName) {
  const auto tokenizer = load_tokenizer("byte");
  EXPECT_EQ(tokenizer->kind(), "byte");
  EXPECT_EQ(tokenizer->vocab_size(), 256);
  EXPECT_FALSE(tokenizer->end_of_text().has_value());
  EXPECT_EQ(tokenizer->encode("hi"), (Ids{'h', 'i'}));
}

}  // namespace
}  // namespace tessera::tokenizer
