// Reads one series' value out of Prometheus text: `name` alone or `name{label="value",...}`
// matches a line of that metric carrying at least those labels, whatever others it has.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace tessera::testing {

// The value, or -1 when no series matches.
inline double metric_value(const std::string& text, const std::string& series) {
  const size_t brace = series.find('{');
  const std::string name = series.substr(0, brace);
  std::vector<std::string> wanted;
  if (brace != std::string::npos) {
    std::stringstream labels(series.substr(brace + 1, series.size() - brace - 2));
    for (std::string pair; std::getline(labels, pair, ',');) wanted.push_back(pair);
  }
  std::stringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t end = line.find_first_of("{ ");
    if (end == std::string::npos || line.substr(0, end) != name) continue;
    const size_t value_at = line.rfind(' ');
    const std::string label_text = line.substr(end, value_at - end);
    bool all = true;
    for (const std::string& pair : wanted) all = all && label_text.find(pair) != std::string::npos;
    if (all) return std::stod(line.substr(value_at + 1));
  }
  return -1;
}

}  // namespace tessera::testing
