// Replacing a small file so that a reader finds, and a process that dies mid-write leaves, either
// the old content or the new, never half of it. Nothing is synced to disk, so it suits files that
// may lose their latest update in a power cut.
#pragma once

#include <filesystem>
#include <string_view>

namespace tessera {

// Writes `content` to a temporary file beside `path`, then renames it over `path`. Throws an
// Error naming `path` when either fails.
void write_file_atomically(const std::filesystem::path& path, std::string_view content);

}  // namespace tessera
