#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/cli/flags.h"
#include "tessera/core/error.h"
#include "tessera/core/text_corpus.h"
#include "tessera/core/utf8.h"
#include "tessera/tokenizer/bpe_trainer.h"
#include "tessera/tokenizer/tessera_tokenizer_files.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::cli {
namespace {

constexpr const char* kTokenizerUsage =
    "usage: tessera tokenizer <train|encode|decode> [flags]\n\n"
    "  train    learn a byte-level BPE vocabulary from text files\n"
    "  encode   print the token ids of the text on stdin\n"
    "  decode   print the text of the token ids on stdin\n\n"
    "Run 'tessera tokenizer <subcommand> --help' for its flags.\n";

std::string read_stdin() {
  std::string text;
  char buffer[1 << 16];
  while (size_t got = std::fread(buffer, 1, sizeof(buffer), stdin)) text.append(buffer, got);
  check(!std::ferror(stdin), "stdin: cannot read");
  return text;
}

struct TokenizerTrainFlags {
  int64_t vocab_size = 0;
  std::string out;
};

int train(int argc, char** argv) {
  TokenizerTrainFlags flags;
  Command command("tokenizer train",
                  "Learn a byte-level BPE vocabulary (GPT-2 pre-tokenisation) from text\n"
                  "files or folders of them.",
                  "FILE...");
  const Settings<TokenizerTrainFlags> rows = {
      required(flag("--vocab-size", "N", &TokenizerTrainFlags::vocab_size,
                    "ids in the vocabulary, <|endoftext|> included")),
      required(flag("--out", "DIR", &TokenizerTrainFlags::out,
                    "directory to write tokenizer.json and ranks.tiktoken")),
  };
  if (!command.flags(rows, flags).parse(argc, argv)) return 0;
  check(!command.operands().empty(),
        "tessera tokenizer train: give at least one FILE to learn from");
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (const std::string& operand : command.operands()) {
    for (const auto& file : corpus_files(operand)) {
      texts.push_back(read_text_file(file));
      bytes += texts.back().size();
    }
  }
  const tokenizer::BpeVocab vocab =
      tokenizer::train_bpe({texts.begin(), texts.end()}, flags.vocab_size);
  tokenizer::save_tessera_tokenizer(vocab, flags.out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t got = int64_t(vocab.tokens.size()) + 1;
  std::printf(
      "trained %lld tokens (%zu merged, <|endoftext|> = %d) on %.1f MB in %.1f s into %s%s\n",
      static_cast<long long>(got), vocab.tokens.size() - 256, vocab.special_tokens[0].second,
      bytes / 1e6, seconds, flags.out.c_str(),
      got < flags.vocab_size ? " (the corpus has no more pairs to merge)" : "");
  return 0;
}

struct EncodeFlags {
  std::string tokenizer;
  bool json = false;
  bool allow_special = false;
};

int encode(int argc, char** argv) {
  EncodeFlags flags;
  Command command("tokenizer encode",
                  "Print the token ids of the text on stdin, on one line. Special tokens\n"
                  "are recognised in the text only with --allow-special; without it\n"
                  "\"<|endoftext|>\" is 13 ordinary characters.");
  const Settings<EncodeFlags> rows = {
      required(flag("--tokenizer", "DIR", &EncodeFlags::tokenizer,
                    "a tokenizer directory, or \"byte\"")),
      flag("--json", "", &EncodeFlags::json, "print a JSON array instead of space-separated ids"),
      flag("--allow-special", "", &EncodeFlags::allow_special,
           "special tokens spelled in the text (<|endoftext|>, ...) are those tokens"),
  };
  if (!command.flags(rows, flags).parse(argc, argv)) return 0;
  const auto tokenizer = tokenizer::load_tokenizer(flags.tokenizer);
  const std::string text = read_stdin();
  const std::vector<int32_t> ids =
      flags.allow_special ? tokenizer->encode_allowing_special(text) : tokenizer->encode(text);
  std::string line;
  if (flags.json) {
    line = nlohmann::json(ids).dump();
  } else {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i) line += ' ';
      line += std::to_string(ids[i]);
    }
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
  return 0;
}

// Space-separated ids, or a JSON array of them.
std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  const auto add = [&](bool is_integer, long long id, std::string_view shown) {
    check(is_integer && id >= INT32_MIN && id <= INT32_MAX, "stdin: \"{}\" is not a token id",
          printable(shown.substr(0, 40)));
    ids.push_back(int32_t(id));
  };
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    nlohmann::json array;
    try {
      array = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail("stdin: not a JSON array of token ids ({})", printable(e.what()));
    }
    for (const nlohmann::json& id : array) {
      add(id.is_number_integer(), id.is_number_integer() ? id.get<long long>() : 0, id.dump());
    }
    return ids;
  }
  for (size_t pos = first; pos != std::string::npos;) {
    const size_t end = std::min(text.find_first_of(" \t\r\n", pos), text.size());
    const std::string word = text.substr(pos, end - pos);
    size_t used = 0;
    long long id = 0;
    try {
      id = std::stoll(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    add(used == word.size(), id, word);
    pos = text.find_first_not_of(" \t\r\n", end);
  }
  return ids;
}

int decode(int argc, char** argv) {
  EncodeFlags flags;
  Command command("tokenizer decode",
                  "Write the text of the token ids on stdin (space-separated or a JSON\n"
                  "array) to stdout, byte for byte.");
  const Settings<EncodeFlags> rows = {required(
      flag("--tokenizer", "DIR", &EncodeFlags::tokenizer, "a tokenizer directory, or \"byte\""))};
  if (!command.flags(rows, flags).parse(argc, argv)) return 0;
  const auto tokenizer = tokenizer::load_tokenizer(flags.tokenizer);
  const std::string text = tokenizer->decode(parse_ids(read_stdin()));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

int tokenizer_command(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  if (sub == "train") return train(argc - 1, argv + 1);
  if (sub == "encode") return encode(argc - 1, argv + 1);
  if (sub == "decode") return decode(argc - 1, argv + 1);
  if (sub == "--help" || sub == "-h") {
    std::fputs(kTokenizerUsage, stdout);
    return 0;
  }
  std::fprintf(stderr, "error: tessera tokenizer: %s\n%s",
               sub.empty() ? "missing subcommand" : ("unknown subcommand '" + sub + "'").c_str(),
               kTokenizerUsage);
  return 2;
}

}  // namespace tessera::cli
