#include "tessera/core/json_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/json_nesting.h"

namespace tessera {

nlohmann::json read_json_file(const std::filesystem::path& path, std::string_view what) {
  const std::string of = what.empty() ? "" : fmt::format(" {}", what);
  std::ifstream in(path, std::ios::binary);
  check(in.good(), "{}: cannot open{}", path.string(), of);
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  check(ec || size <= uintmax_t(kMaxJsonFileBytes),
        "{}: {} bytes{}, more than the {} a JSON file may hold", path.string(), size,
        what.empty() ? "" : fmt::format(" ({})", what), kMaxJsonFileBytes);
  std::ostringstream text;
  text << in.rdbuf();
  check(!in.bad(), "{}: cannot read{}", path.string(), of);
  const std::string body = text.str();
  check(json_nesting_depth(body, kMaxJsonFileNesting) <= kMaxJsonFileNesting,
        "{}: arrays and objects nest more than {} deep{}", path.string(), kMaxJsonFileNesting,
        what.empty() ? "" : fmt::format(" ({})", what));
  try {
    return nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON{}: {}", path.string(), what.empty() ? "" : fmt::format(" ({})", what),
         e.what());
  }
}

}  // namespace tessera
