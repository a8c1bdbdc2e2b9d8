#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>

namespace tessera {

// Reads and parses a JSON file; a file that cannot be read or is not JSON is an error naming it.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace tessera
