#include "tessera/core/checksum.h"

#include <zlib.h>

#include <algorithm>
#include <vector>

#include "tessera/core/threading.h"

namespace tessera {
namespace {

uint32_t crc32_serial(const Bytef* p, size_t size, uLong crc) {
  // zlib's length parameter is a 32-bit uInt, so larger buffers go through in pieces.
  constexpr size_t kPiece = size_t{1} << 30;
  while (size > 0) {
    size_t n = std::min(size, kPiece);
    crc = ::crc32(crc, p, static_cast<uInt>(n));
    p += n;
    size -= n;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  // One core checksums ~1.7 GB/s, which would dominate saving a large model from page cache, so
  // big buffers are split across threads and the pieces joined with crc32_combine.
  constexpr size_t kMinPiece = size_t{2} << 20;
  const auto* p = static_cast<const Bytef*>(data);
  const int pieces = static_cast<int>(std::min<size_t>(num_threads(), size / kMinPiece));
  if (pieces <= 1) return crc32_serial(p, size, crc);
  const size_t piece = size / pieces;
  std::vector<uLong> crcs(pieces);
#pragma omp parallel for num_threads(pieces)
  for (int i = 0; i < pieces; ++i) {
    size_t n = i + 1 == pieces ? size - piece * i : piece;
    crcs[i] = crc32_serial(p + piece * i, n, 0);
  }
  uLong c = crc;
  for (int i = 0; i < pieces; ++i) {
    size_t n = i + 1 == pieces ? size - piece * i : piece;
    c = ::crc32_combine(c, crcs[i], static_cast<z_off_t>(n));
  }
  return static_cast<uint32_t>(c);
}

}  // namespace tessera
