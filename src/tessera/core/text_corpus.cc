#include "tessera/core/text_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <system_error>
#include <vector>

#include "tessera/core/error.h"

namespace fs = std::filesystem;

namespace tessera {
namespace {

bool is_hidden(const fs::path& path) {
  std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

std::vector<fs::path> list_files(const fs::path& root) {
  std::vector<fs::path> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(root, ec), end;
  while (true) {
    if (ec) fail("{}: cannot list the folder ({})", root.string(), ec.message());
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

std::vector<fs::path> corpus_files(const fs::path& path) {
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found) {
    fail("{}: no such file or directory", path.string());
  }
  if (ec) fail("{}: {}", path.string(), ec.message());
  if (fs::is_directory(status)) return list_files(path);
  if (!fs::is_regular_file(status)) fail("{}: not a regular file or folder", path.string());
  return {path};
}

bool is_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::string read_text_file(const fs::path& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) fail("{}: cannot read the file ({})", path.string(), std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0) text.append(buffer, got);
  if (std::ferror(file.get())) {
    fail("{}: cannot read the file ({})", path.string(), std::strerror(errno));
  }
  return text;
}

void write_text_file(const fs::path& path, std::string_view text) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"),
                                                       &std::fclose);
  if (!file) fail("{}: cannot write the file ({})", path.string(), std::strerror(errno));
  if (std::fwrite(text.data(), 1, text.size(), file.get()) != text.size() ||
      std::fclose(file.release()) != 0) {
    fail("{}: cannot write the file ({})", path.string(), std::strerror(errno));
  }
}

}  // namespace tessera
