#include "tessera/core/checksum.h"

#include <isa-l/crc.h>
#include <zlib.h>

namespace tessera {

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  // ISA-L folds with carry-less multiplies (~20 GB/s on one core, against zlib's ~2), so saving a
  // large model checksums at memory speed.
  return crc32_gzip_refl(crc, static_cast<const unsigned char*>(data), size);
}

uint32_t crc32_combine(uint32_t first, uint32_t second, size_t second_size) {
  return static_cast<uint32_t>(
      ::crc32_combine64(first, second, static_cast<z_off64_t>(second_size)));
}

}  // namespace tessera
