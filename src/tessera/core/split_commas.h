// Splitting a comma-separated command-line value ("h100,b200", "1024,2048").
#pragma once

#include <string>
#include <vector>

namespace tessera {

// The parts between commas, empty ones kept: "a,,b" gives {"a", "", "b"}, "" gives {""}.
std::vector<std::string> split_commas(const std::string& text);

}  // namespace tessera
