#include "tessera/data/tokenizer.h"

#include <memory>

#include "tessera/core/error.h"
#include "tessera/core/utf8.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/byte_tokenizer.h"
#include "tessera/data/gpt2_vocab_files.h"
#include "tessera/data/tessera_tokenizer_files.h"
#include "tessera/data/tiktoken_ranks.h"
#include "tessera/data/tokenizer_copy.h"

namespace fs = std::filesystem;

namespace tessera::data {
namespace {

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_dir) {
  if (name_or_dir == "byte") return std::make_unique<ByteTokenizer>();
  const fs::path dir(name_or_dir);
  const std::string shown = printable(name_or_dir);
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  check(fs::exists(status), "{}: no such tokenizer directory (give \"byte\" or a directory)",
        shown);
  check(fs::is_directory(status), "{}: a tokenizer must be \"byte\" or a directory", shown);
  const TokenizerFileReader files(dir);
  auto read_ranks = [&](const fs::path& path) {
    return parse_tiktoken_ranks(files.read(path), printable(path.string()));
  };

  if (is_file(dir / kTesseraConfigFile)) {
    const fs::path config = dir / kTesseraConfigFile;
    BpeVocab vocab = read_ranks(dir / kTesseraRanksFile);
    vocab.special_tokens = parse_tessera_config(files.read(config), printable(config.string()));
    return std::make_unique<BpeTokenizer>(std::move(vocab), "tessera-bpe", shown);
  }
  const fs::path encoder = dir / "encoder.json", merges = dir / "vocab.bpe";
  if (is_file(encoder) || is_file(merges)) {
    check(is_file(encoder) && is_file(merges), "{}: GPT-2 format needs both {} and {}", shown,
          encoder.filename().string(), merges.filename().string());
    BpeVocab vocab = parse_gpt2_vocab(files.read(encoder), printable(encoder.string()),
                                      files.read(merges), printable(merges.string()));
    return std::make_unique<BpeTokenizer>(std::move(vocab), "gpt2-bpe", shown);
  }
  std::vector<fs::path> rank_files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".tiktoken" && is_file(it->path())) {
      rank_files.push_back(it->path());
    }
  }
  check(!ec, "{}: cannot list the directory ({})", shown, ec.message());
  check(rank_files.size() <= 1, "{}: {} .tiktoken files; keep exactly one", shown,
        rank_files.size());
  check(!rank_files.empty(),
        "{}: no tokenizer found (expected encoder.json + vocab.bpe, *.tiktoken, or {})", shown,
        kTesseraConfigFile);
  // A bare rank file carries no special tokens; GPT-2's <|endoftext|> follows the last rank.
  BpeVocab vocab = read_ranks(rank_files[0]);
  vocab.special_tokens = {{kEndOfText, int32_t(vocab.tokens.size())}};
  return std::make_unique<BpeTokenizer>(std::move(vocab), "gpt2-bpe", shown);
}

}  // namespace tessera::data
