#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

namespace tessera {

// Reads and parses a JSON file; a file that cannot be read or is not JSON is an error naming it
// and, when given, what the file is ("the checkpoint manifest").
nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view what = "");

}  // namespace tessera
