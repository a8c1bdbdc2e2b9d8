#include "tessera/core/json_file.h"

#include <fstream>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "{}: cannot open", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  check(!in.bad(), "{}: cannot read", path.string());
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

}  // namespace tessera
