#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// The files behind a corpus path. A file is itself. A folder is walked recursively: regular files
// in std::filesystem::path order (element by element, so a folder's files stay together), hidden
// files and folders (names starting with '.') skipped. Throws an Error naming the path if it is
// missing or unreadable.
std::vector<std::filesystem::path> corpus_files(const std::filesystem::path& path);

// Whether the path names a regular file (following links); false where it cannot be read.
bool is_file(const std::filesystem::path& path);
// A whole file; the error names the path.
std::string read_text_file(const std::filesystem::path& path);
// Creates or replaces the file with `text`; the error names the path.
void write_text_file(const std::filesystem::path& path, std::string_view text);

}  // namespace tessera
