#include "tessera/core/atomic_file.h"

#include <fstream>
#include <string>

#include "tessera/core/error.h"

namespace tessera {

void write_file_atomically(const std::filesystem::path& path, std::string_view content) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), std::streamsize(content.size()));
    check(out.good(), "{}: cannot write {}", path.string(), tmp.filename().string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  check(!ec, "{}: cannot replace it with {}: {}", path.string(), tmp.filename().string(),
        ec.message());
}

}  // namespace tessera
