// Run configs are outside input: any text must load or fail with a tessera::Error, and a loaded
// config must validate or fail the same way.
#include <cstdint>
#include <string_view>

#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/train/run_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tessera::Config config(tessera::train::run_config_schema());
    config.load_string({reinterpret_cast<const char*>(data), size}, "fuzz.toml");
    tessera::train::run_config_from(config);
    config.load_string(config.to_toml(), "round-trip.toml");
  } catch (const tessera::Error&) {
  }
  return 0;
}
