#include "tessera/serve/adapter_admin.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tessera/serve/openai_api.h"

namespace tessera::serve {

namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxAdapterPath = 4096;

std::string string_field(const nlohmann::json& body, const char* name, size_t longest) {
  const auto it = body.find(name);
  if (it == body.end() || !it->is_string() || it->get_ref<const std::string&>().empty()) {
    throw ApiError(400, fmt::format("'{}' must be a non-empty string", name),
                   "invalid_request_error", name);
  }
  const std::string& value = it->get_ref<const std::string&>();
  if (value.size() > longest || value.find('\0') != std::string::npos) {
    throw ApiError(400, fmt::format("'{}' must be at most {} bytes, without NUL", name, longest),
                   "invalid_request_error", name);
  }
  return value;
}

}  // namespace

AdapterChange parse_adapter_change(const std::string& body_text, bool load) {
  const nlohmann::json body = request_body(body_text);
  AdapterChange change;
  change.name = string_field(body, "lora_name", 128);
  if (load) change.path = string_field(body, "lora_path", kMaxAdapterPath);
  return change;
}

fs::path adapter_path_within(const fs::path& dir, const std::string& path) {
  std::error_code error;
  const fs::path root = fs::weakly_canonical(dir, error);
  const fs::path resolved = fs::weakly_canonical(root / path, error);
  const auto [outside, inside] =
      std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  if (error || outside != root.end()) {
    throw ApiError(403,
                   fmt::format("'lora_path' must lie inside the server's adapter folder "
                               "(--lora-dir), which {} does not",
                               json_text(path)),
                   "invalid_request_error", "lora_path", "permission_denied");
  }
  if (!fs::is_directory(resolved, error)) {
    throw ApiError(404,
                   fmt::format("'lora_path': no adapter folder {} in the server's adapter folder",
                               json_text(path)),
                   "invalid_request_error", "lora_path", "not_found");
  }
  return resolved;
}

}  // namespace tessera::serve
