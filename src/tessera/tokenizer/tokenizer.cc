#include "tessera/tokenizer/tokenizer.h"

#include <memory>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/core/text_corpus.h"
#include "tessera/core/utf8.h"
#include "tessera/tokenizer/bpe_tokenizer.h"
#include "tessera/tokenizer/byte_tokenizer.h"
#include "tessera/tokenizer/gpt2_vocab_files.h"
#include "tessera/tokenizer/hf_tokenizer_file.h"
#include "tessera/tokenizer/tessera_tokenizer_files.h"
#include "tessera/tokenizer/tiktoken_ranks.h"
#include "tessera/tokenizer/tokenizer_copy.h"

namespace fs = std::filesystem;

namespace tessera::tokenizer {
namespace {

enum class Format { kTessera, kHfTokenizerJson, kGpt2Files, kTiktoken };

// The format a tokenizer folder holds and the files it is read from, in the order of the table
// in docs/tokenizer.md.
struct FolderFormat {
  Format format;
  std::vector<fs::path> files;
};

// nullopt when the folder holds none of the formats' files; a format whose files are incomplete
// or ambiguous is an error.
std::optional<FolderFormat> find_folder_format(const fs::path& dir) {
  const std::string shown = printable(dir.string());
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  check(fs::exists(status), "{}: no such tokenizer directory (give \"byte\" or a directory)",
        shown);
  check(fs::is_directory(status), "{}: a tokenizer must be \"byte\" or a directory", shown);
  if (is_file(dir / kTesseraConfigFile) && is_file(dir / kTesseraRanksFile)) {
    return FolderFormat{Format::kTessera, {dir / kTesseraConfigFile, dir / kTesseraRanksFile}};
  }
  // Hugging Face's formats carry their tokenizer_config.json along, for its chat template.
  const auto with_config = [&dir](std::vector<fs::path> files) {
    if (is_file(dir / kHfTokenizerConfigFile)) files.push_back(dir / kHfTokenizerConfigFile);
    return files;
  };
  if (is_file(dir / kHfTokenizerFile)) {
    return FolderFormat{Format::kHfTokenizerJson, with_config({dir / kHfTokenizerFile})};
  }
  // GPT-2's original files, and the same two under the names Hugging Face gives them.
  for (const auto& [vocab_name, merges_name] :
       {std::pair{"encoder.json", "vocab.bpe"}, std::pair{"vocab.json", "merges.txt"}}) {
    const fs::path encoder = dir / vocab_name, merges = dir / merges_name;
    if (!is_file(encoder) && !is_file(merges)) continue;
    check(is_file(encoder) && is_file(merges), "{}: GPT-2 format needs both {} and {}", shown,
          vocab_name, merges_name);
    return FolderFormat{Format::kGpt2Files, with_config({encoder, merges})};
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
  if (rank_files.empty()) return std::nullopt;
  return FolderFormat{Format::kTiktoken, rank_files};
}

FolderFormat folder_format(const fs::path& dir) {
  std::optional<FolderFormat> found = find_folder_format(dir);
  check(found.has_value(),
        "{}: no tokenizer found (expected Hugging Face's tokenizer.json or vocab.json + "
        "merges.txt, GPT-2's encoder.json + vocab.bpe, a *.tiktoken file, or Tessera's {} + {})",
        printable(dir.string()), kTesseraConfigFile, kTesseraRanksFile);
  return std::move(*found);
}

BpeVocab read_folder_vocab(const fs::path& dir, const FolderFormat& found) {
  const TokenizerFileReader reader(dir);
  const auto read = [&](size_t i) { return reader.read(found.files[i]); };
  const auto source = [&](size_t i) { return printable(found.files[i].string()); };
  switch (found.format) {
    case Format::kTessera: {
      BpeVocab vocab = parse_tiktoken_ranks(read(1), source(1));
      vocab.special_tokens = parse_tessera_config(read(0), source(0));
      return vocab;
    }
    case Format::kHfTokenizerJson:
      return parse_hf_tokenizer(read(0), source(0));
    case Format::kGpt2Files:
      return parse_gpt2_vocab(read(0), source(0), read(1), source(1));
    case Format::kTiktoken: {
      // A bare rank file carries no special tokens; GPT-2's <|endoftext|> follows the last rank.
      BpeVocab vocab = parse_tiktoken_ranks(read(0), source(0));
      vocab.special_tokens = {{kEndOfText, int32_t(vocab.tokens.size())}};
      return vocab;
    }
  }
  fail("{}: unknown tokenizer format", printable(dir.string()));
}

}  // namespace

std::vector<fs::path> tokenizer_files(const fs::path& dir) { return folder_format(dir).files; }

bool holds_tokenizer(const fs::path& dir) { return find_folder_format(dir).has_value(); }

BpeVocab read_bpe_vocab(const std::string& name_or_dir) {
  if (name_or_dir == "byte") {
    BpeVocab bytes;
    for (int b = 0; b < 256; ++b) bytes.tokens.emplace_back(1, char(b));
    return bytes;
  }
  return read_folder_vocab(name_or_dir, folder_format(name_or_dir));
}

std::vector<int32_t> Tokenizer::encode_allowing_special(std::string_view text) const {
  std::vector<int32_t> ids;
  size_t done = 0;
  while (done < text.size()) {
    size_t next = std::string_view::npos, length = 0;
    int32_t special = -1;
    for (const auto& [spelled, id] : special_tokens()) {
      const size_t at = text.find(spelled, done);
      if (at < next || (at == next && at != std::string_view::npos && spelled.size() > length)) {
        next = at;
        length = spelled.size();
        special = id;
      }
    }
    const std::string_view plain =
        text.substr(done, next == std::string_view::npos ? std::string_view::npos : next - done);
    if (!plain.empty()) {
      const std::vector<int32_t> part = encode(plain);
      ids.insert(ids.end(), part.begin(), part.end());
    }
    if (next == std::string_view::npos) break;
    ids.push_back(special);
    done = next + length;
  }
  return ids;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& name_or_dir) {
  if (name_or_dir == "byte") return std::make_unique<ByteTokenizer>();
  const FolderFormat found = folder_format(name_or_dir);
  const char* kind = found.format == Format::kTessera           ? "tessera-bpe"
                     : found.format == Format::kHfTokenizerJson ? "hf-bpe"
                                                                : "gpt2-bpe";
  return std::make_unique<BpeTokenizer>(read_folder_vocab(name_or_dir, found), kind,
                                        printable(name_or_dir));
}

}  // namespace tessera::tokenizer
