#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// CRC-32 (the zlib / PNG / gzip polynomial) of any size of buffer. Pass the previous result as
// `crc` to continue a checksum over several pieces; start from 0.
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);

}  // namespace tessera
