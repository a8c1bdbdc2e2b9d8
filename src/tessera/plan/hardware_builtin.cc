// The built-in catalog lives apart from the parser, which fuzzing builds without CMake's
// generated header.
#include "tessera/plan/hardware.h"
#include "tessera/plan/hardware_catalog_data.h"

namespace tessera::plan {

HardwareCatalog HardwareCatalog::builtin() {
  return parse(kHardwareCatalogToml, "configs/hardware.toml (built in)");
}

}  // namespace tessera::plan
