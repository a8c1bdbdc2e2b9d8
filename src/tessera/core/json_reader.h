#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "tessera/core/error.h"

namespace tessera {

// Typed field access for JSON that came from outside (manifests on disk): every missing field,
// wrong type or bad value fails with one line naming the source file and the field's path.
class JsonReader {
 public:
  // `source` names the input in errors and must outlive the reader.
  explicit JsonReader(const std::string& source) : source_(source) {}
  const std::string& source() const { return source_; }

  const nlohmann::json& field(const nlohmann::json& object, const std::string& key,
                              const std::string& path) const {
    auto it = object.find(key);
    if (it == object.end()) fail("{}: missing field '{}'", source_, path);
    return *it;
  }

  std::string string(const nlohmann::json& v, const std::string& path) const {
    if (!v.is_string()) wrong_type(v, path, "a string");
    return v.get<std::string>();
  }

  int64_t int64(const nlohmann::json& v, const std::string& path) const {
    if (v.is_number_unsigned() && v.get<uint64_t>() <= uint64_t{INT64_MAX}) return v.get<int64_t>();
    if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
    wrong_type(v, path, "a 64-bit integer");
  }

  uint64_t uint64(const nlohmann::json& v, const std::string& path) const {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<uint64_t>();
    wrong_type(v, path, "a non-negative integer");
  }

  [[noreturn]] void wrong_type(const nlohmann::json& v, const std::string& path,
                               const char* want) const {
    std::string got = v.dump();
    if (got.size() > 40) got = got.substr(0, 37) + "...";
    fail("{}: field '{}' must be {}, got {}", source_, path, want, got);
  }

  [[noreturn]] void bad(const std::string& path, const std::string& why) const {
    fail("{}: field '{}' {}", source_, path, why);
  }

 private:
  const std::string& source_;
};

}  // namespace tessera
