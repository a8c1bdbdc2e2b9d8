#include "tessera/obs/metrics_log.h"

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"

namespace tessera::obs {

JsonlWriter::JsonlWriter(const std::filesystem::path& path)
    : path_(path), file_(std::fopen(path.c_str(), "a")) {
  check(file_ != nullptr, "{}: cannot open for writing ({})", path.string(), std::strerror(errno));
}

JsonlWriter::~JsonlWriter() { std::fclose(file_); }

void JsonlWriter::write(const nlohmann::json& record) {
  std::string line = record.dump() + "\n";
  check(std::fwrite(line.data(), 1, line.size(), file_) == line.size() && std::fflush(file_) == 0,
        "{}: write failed ({})", path_.string(), std::strerror(errno));
}

}  // namespace tessera::obs
