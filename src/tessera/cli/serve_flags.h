// The flags of `tessera serve` and `tessera generate`, as rows over the serving layer's option
// structs: each default is the struct's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/comm/mesh.h"
#include "tessera/core/settings.h"
#include "tessera/serve/api_routes.h"
#include "tessera/serve/engine.h"
#include "tessera/serve/http_server.h"
#include "tessera/serve/served_model.h"

namespace tessera::cli {

// --precision, --quantize and --device.
Settings<serve::ServingFormat> serving_format_flags();

struct ServeFlags {
  std::string checkpoint;
  std::string chat_template;
  std::string draft;              // a draft model's checkpoint for speculative decoding, or none
  std::vector<std::string> lora;  // NAME=PATH: LoRA adapters served per request
  std::string lora_dir;           // where adapters may be loaded from while serving, or none
  std::optional<std::string> api_key;     // default: TESSERA_API_KEY, else none
  std::optional<std::string> model_name;  // default: the checkpoint's folder name
  std::optional<int64_t> max_tokens_cap;  // default: the model's context
  std::optional<int64_t> threads;         // default: every core but one
  std::chrono::milliseconds drain{30'000};
  serve::ServingFormat format;
  serve::EngineOptions engine;
  serve::RouteOptions routes;
  serve::HttpOptions http;
};

Settings<ServeFlags> serve_flags();

// The mesh of format.tp x format.pp x format.ep ranks over this job's world, which must hold
// exactly that many, made the format's mesh; null for one rank.
std::unique_ptr<comm::Mesh> serving_mesh(serve::ServingFormat& format);

}  // namespace tessera::cli
