// The observability layer: where a run's numbers go. It formats and writes; it never decides
// anything about training.
#pragma once

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace tessera::obs {

// Appends one JSON object per line to a file, flushed per line so a crash loses nothing.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::filesystem::path& path);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;
  void write(const nlohmann::json& record);

 private:
  std::filesystem::path path_;
  std::FILE* file_;
};

}  // namespace tessera::obs
