#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

namespace tessera {

// Files are outside input: a JSON file larger than this, or nesting arrays and objects deeper,
// is refused before it is parsed (the parser recurses once per level).
inline constexpr int64_t kMaxJsonFileBytes = int64_t{256} << 20;
inline constexpr int64_t kMaxJsonFileNesting = 64;

// Reads and parses a JSON file; a file that cannot be read, is not JSON, or passes the bounds
// above is an error naming it and, when given, what the file is ("the checkpoint manifest").
nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view what = "");

}  // namespace tessera
