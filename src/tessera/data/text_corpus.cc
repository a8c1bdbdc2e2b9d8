#include "tessera/data/text_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>
#include <vector>

#include "tessera/core/error.h"

namespace fs = std::filesystem;

namespace tessera::data {
namespace {

bool is_hidden(const fs::path& path) {
  std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

void append_file(const fs::path& path, std::string& out) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) fail("--data {}: cannot read the file ({})", path.string(), std::strerror(errno));
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) out.append(buffer, got);
  if (std::ferror(file.get())) {
    fail("--data {}: cannot read the file ({})", path.string(), std::strerror(errno));
  }
}

std::vector<fs::path> list_files(const fs::path& root) {
  std::vector<fs::path> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, ec), end;
  while (true) {
    if (ec) fail("--data {}: cannot list the folder ({})", root.string(), ec.message());
    if (it == end) break;
    const fs::path& path = it->path();
    std::error_code entry_ec;  // a broken link is skipped, not fatal
    if (is_hidden(path)) {
      if (it->is_directory(entry_ec)) it.disable_recursion_pending();
    } else if (it->is_regular_file(entry_ec)) {
      files.push_back(path);
    }
    it.increment(ec);
  }
  // Directory iteration order is unspecified; sorting makes the token stream reproducible.
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::string read_corpus(const fs::path& path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) {
    fail("--data {}: no such file or directory", path.string());
  }
  if (ec) fail("--data {}: {}", path.string(), ec.message());

  std::string corpus;
  if (fs::is_directory(status)) {
    std::string text;
    for (const fs::path& file : list_files(path)) {
      text.clear();
      append_file(file, text);
      if (text.empty()) continue;  // an empty file would only add a stray separator
      if (!corpus.empty()) corpus += '\n';
      corpus += text;
    }
  } else if (fs::is_regular_file(status)) {
    append_file(path, corpus);
  } else {
    fail("--data {}: not a regular file or folder", path.string());
  }
  check(!corpus.empty(), "--data {}: the corpus is empty", path.string());
  return corpus;
}

}  // namespace tessera::data
