// vLLM's routes for changing the served LoRA adapters while serving: POST /v1/load_lora_adapter
// {"lora_name", "lora_path"} and POST /v1/unload_lora_adapter {"lora_name"}.
#pragma once

#include <filesystem>
#include <string>

namespace tessera::serve {

struct AdapterChange {
  std::string name;
  std::string path;  // as the request gave it; empty for an unload
};

// Parses and checks a load (with a path) or unload request's body; throws ApiError 400 naming
// the field at fault.
AdapterChange parse_adapter_change(const std::string& body, bool load);

// Where `path` (relative to `dir`, or absolute) points, which must be inside `dir` once links
// and ".." are resolved: the server reads adapters from the folder its operator named, never
// from where a client chooses. Throws ApiError: 403 outside it, 404 when nothing is there.
std::filesystem::path adapter_path_within(const std::filesystem::path& dir,
                                          const std::string& path);

}  // namespace tessera::serve
