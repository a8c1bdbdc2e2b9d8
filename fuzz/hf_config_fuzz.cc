// A Hugging Face folder's config.json is outside input: any JSON must come out as a model config
// Tessera runs, or fail with a tessera::Error naming the field; and what export writes for an
// accepted config must import as a model that exports the same.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/interop/hf_names.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto json = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return 0;  // not JSON: read_json_file reports that first
  tessera::model::ModelConfig config;
  try {
    config = tessera::interop::model_config_from_hf(json, "fuzz/config.json");
  } catch (const tessera::Error&) {
    return 0;
  }
  using tessera::interop::hf_config_json;
  const nlohmann::json written = hf_config_json(config, tessera::DType::f32);
  const tessera::model::ModelConfig again =
      tessera::interop::model_config_from_hf(written, "fuzz/written.json");
  if (hf_config_json(again, tessera::DType::f32) != written) __builtin_trap();
  return 0;
}
