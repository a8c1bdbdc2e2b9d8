#include "tessera/core/json_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {

nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view what) {
  const std::string of = what.empty() ? "" : fmt::format(" {}", what);
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "{}: cannot open{}", path.string(), of);
  std::ostringstream text;
  text << in.rdbuf();
  check(!in.bad(), "{}: cannot read{}", path.string(), of);
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON{}: {}", path.string(), what.empty() ? "" : fmt::format(" ({})", what),
         e.what());
  }
}

}  // namespace tessera
