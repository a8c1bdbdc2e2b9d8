#include "tessera/tokenizer/tokenizer_copy.h"

#include <nlohmann/json.hpp>

#include "tessera/core/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/json_reader.h"
#include "tessera/core/text_corpus.h"
#include "tessera/core/utf8.h"
#include "tessera/tokenizer/tokenizer.h"

namespace tessera::tokenizer {
namespace {

namespace fs = std::filesystem;
using Digests = std::map<std::string, uint32_t>;

uint32_t crc_of(const std::string& text) { return crc32(text.data(), text.size()); }

// digests.json: {"crc32": {"<file name>": <crc32>, ...}}.
std::string digests_text(const Digests& digests) {
  return nlohmann::json{{"crc32", digests}}.dump(2) + "\n";
}

Digests parse_digests(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", source, printable(e.what()));
  }
  const JsonReader r(source);
  if (!j.is_object()) r.wrong_type(j, "(top level)", "an object");
  const nlohmann::json& files = r.field(j, "crc32", "crc32");
  if (!files.is_object()) r.wrong_type(files, "crc32", "an object of file name -> crc32");
  Digests digests;
  for (const auto& [name, crc] : files.items()) {
    const std::string at = "crc32." + printable(name);
    const uint64_t value = r.uint64(crc, at);
    if (value > 0xffffffffu) r.bad(at, "does not fit in 32 bits");
    digests[name] = uint32_t(value);
  }
  return digests;
}

// True when `dir` holds exactly the files `digests` lists, with those digests.
bool holds_copy(const fs::path& dir, const Digests& digests) {
  const fs::path listing = dir / kTokenizerDigestsFile;
  if (!is_file(listing) || read_text_file(listing) != digests_text(digests)) return false;
  for (const auto& [name, crc] : digests) {
    if (!is_file(dir / name) || crc_of(read_text_file(dir / name)) != crc) return false;
  }
  return true;
}

}  // namespace

TokenizerFileReader::TokenizerFileReader(const fs::path& dir)
    : digests_path_(dir / kTokenizerDigestsFile) {
  if (!is_file(digests_path_)) return;
  digests_ = parse_digests(read_text_file(digests_path_), printable(digests_path_.string()));
  // A file gone from the copy would change which tokenizer the folder holds, not fail a read.
  for (const auto& [name, crc] : *digests_) {
    check(is_file(dir / name), "{}: listed in {}, but missing; the tokenizer copy is incomplete",
          printable((dir / name).string()), printable(digests_path_.string()));
  }
}

std::string TokenizerFileReader::read(const fs::path& file) const {
  std::string text = read_text_file(file);
  if (!digests_) return text;
  const std::string shown = printable(file.string());
  auto it = digests_->find(file.filename().string());
  check(it != digests_->end(), "{}: not listed in {}, so it is not part of the tokenizer copy",
        shown, printable(digests_path_.string()));
  const uint32_t crc = crc_of(text);
  check(crc == it->second,
        "{}: checksum mismatch: its crc32 is {}, {} records {}; the tokenizer copy is corrupted",
        shown, crc, printable(digests_path_.string()), it->second);
  return text;
}

void copy_tokenizer(const fs::path& from, const fs::path& to) {
  const TokenizerFileReader source(from);
  std::map<std::string, std::string> files;
  for (const fs::path& file : tokenizer_files(from)) {
    files[file.filename().string()] = source.read(file);
  }
  Digests digests;
  for (const auto& [name, text] : files) digests[name] = crc_of(text);
  if (holds_copy(to, digests)) return;

  std::error_code ec;
  fs::remove_all(to, ec);
  check(!ec, "{}: cannot remove the old tokenizer copy ({})", printable(to.string()), ec.message());
  fs::create_directories(to, ec);
  check(!ec, "{}: cannot create the folder ({})", printable(to.string()), ec.message());
  // The digests go first: a copy cut short is then refused as corrupted, not read unchecked.
  write_text_file(to / kTokenizerDigestsFile, digests_text(digests));
  for (const auto& [name, text] : files) write_text_file(to / name, text);
}

}  // namespace tessera::tokenizer
