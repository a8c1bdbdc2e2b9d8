// A tokenizer folder that Tessera copies into a dataset or a run folder carries digests.json, the
// crc32 of every file copied, so a byte that changes in the copy afterwards is refused where the
// folder is read instead of silently changing how text is encoded and decoded. A folder without
// digests.json (a tokenizer folder of one's own) is read unchecked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace tessera::tokenizer {

inline constexpr char kTokenizerDigestsFile[] = "digests.json";
// The folder in a run or a prepared dataset that holds its copy of the tokenizer.
inline constexpr char kTokenizerCopyDir[] = "tokenizer";

// Copies the files of the tokenizer folder `from` that its format reads (tokenizer_files) into
// `to`, with to/digests.json, unless `to` already holds exactly that copy (another rank of the
// job, or an earlier start of the run, made it). Each file of `from` is read through a
// TokenizerFileReader, so copying a copy checks it.
void copy_tokenizer(const std::filesystem::path& from, const std::filesystem::path& to);

// Reads the files of one tokenizer folder, checking each against the folder's digests.json when
// it has one: a file the digests list that is missing, a file they do not list, or one whose
// bytes differ from its digest, is an error naming the file.
class TokenizerFileReader {
 public:
  explicit TokenizerFileReader(const std::filesystem::path& dir);
  std::string read(const std::filesystem::path& file) const;

 private:
  std::filesystem::path digests_path_;
  std::optional<std::map<std::string, uint32_t>> digests_;  // file name -> crc32
};

}  // namespace tessera::tokenizer
