// Accelerator catalogs and price files are outside input: any text must parse into a catalog or
// fail with a tessera::Error, and merging what parsed must do the same.
#include <cstdint>
#include <string_view>

#include "tessera/core/error.h"
#include "tessera/plan/hardware.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    tessera::plan::HardwareCatalog catalog = tessera::plan::HardwareCatalog::parse(text, "a.toml");
    catalog.merge(tessera::plan::HardwareCatalog::parse(text, "b.toml"));
    for (const tessera::plan::Accelerator& a : catalog.entries()) catalog.find(a.name);
  } catch (const tessera::Error&) {
  }
  return 0;
}
