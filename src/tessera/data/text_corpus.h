#pragma once

#include <filesystem>
#include <string>

namespace tessera::data {

// Reads the training text behind `--data`. A file is read whole. A folder is walked
// recursively: regular files in std::filesystem::path order (element by element, so a folder's
// files stay together), hidden files and folders (names starting with '.') skipped, the
// non-empty files joined with one "\n" between them. Throws an Error naming the path if it is
// missing or unreadable, or if the corpus is empty.
std::string read_corpus(const std::filesystem::path& path);

}  // namespace tessera::data
