// A PEFT adapter's adapter_config.json is outside input: any JSON must come out as the adapted
// settings of the model it is read for, or fail with a tessera::Error naming the problem. Each
// input is read for a Llama and for a GPT-2, whose modules differ.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/interop/peft_adapter.h"

namespace {

tessera::model::ModelConfig base(tessera::model::Architecture arch) {
  tessera::model::ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = arch == tessera::model::Architecture::kLlama ? 2 : 0;
  c.d_model = 32;
  c.tie_embeddings = arch == tessera::model::Architecture::kGpt2;
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: read_json_file reports that before the settings are read
  }
  for (const auto arch :
       {tessera::model::Architecture::kLlama, tessera::model::Architecture::kGpt2}) {
    try {
      tessera::interop::peft_settings(json, base(arch), "fuzz/adapter_config.json");
    } catch (const tessera::Error&) {
    }
  }
  return 0;
}
