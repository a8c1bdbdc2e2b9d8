#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera {

// CRC-32 (the zlib / PNG / gzip polynomial) of any size of buffer. Pass the previous result as
// `crc` to continue a checksum over several pieces; start from 0.
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);
// The CRC-32 of two pieces one after the other, from each piece's own CRC-32 (started from 0 for
// the second): what lets pieces be checksummed in parallel.
uint32_t crc32_combine(uint32_t first, uint32_t second, size_t second_size);

}  // namespace tessera
