// Checkpoint manifests are outside input: any JSON must parse into a validated manifest or fail
// with a tessera::Error. Each input is parsed as given, which tries the manifest's own checksum,
// and again with that checksum made to match, so the checks behind it are reached too.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tessera/ckpt/manifest.h"
#include "tessera/core/error.h"

namespace {

void parse(const nlohmann::json& json) {
  try {
    tessera::ckpt::parse_manifest(json, "fuzz.json");
  } catch (const tessera::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;  // not JSON: read_manifest reports that before parse_manifest runs
  }
  parse(json);
  if (json.is_object()) {
    json[tessera::ckpt::kManifestChecksumKey] = tessera::ckpt::manifest_checksum(json);
    parse(json);
  }
  return 0;
}
