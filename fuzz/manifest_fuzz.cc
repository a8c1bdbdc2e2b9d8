// Checkpoint manifests are outside input: any JSON must parse into a validated manifest or fail
// with a tessera::Error.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/manifest.h"
#include "tessera/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: read_manifest reports that before parse_manifest runs
  }
  try {
    tessera::ckpt::parse_manifest(json, "fuzz.json");
  } catch (const tessera::Error&) {
  }
  return 0;
}
