#include "tessera/ckpt/data_image.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/checksum.h"
#include "tessera/core/error.h"
#include "tessera/core/huge_pages.h"

namespace tessera::ckpt {
namespace {

// Copied and checksummed in pieces that stay in cache between the two.
constexpr size_t kPieceBytes = size_t{1} << 20;

}  // namespace

DataFileLayout data_file_layout(const std::vector<NamedTensor>& tensors) {
  DataFileLayout layout;
  for (const NamedTensor& t : tensors) {
    const uint64_t offset = round_up(layout.size, kTensorAlignment);
    const uint64_t nbytes = t.tensor.nbytes();
    layout.tensors.push_back({t.name, t.tensor.shape, t.tensor.dtype, "", offset, nbytes, 0});
    layout.size = offset + nbytes;
  }
  return layout;
}

DataImage::~DataImage() { release(); }

void DataImage::release() {
  free_large(buffer_);
  buffer_ = nullptr;
  capacity_ = 0;
}

void DataImage::allocate(uint64_t size) {
  const size_t capacity = round_up(std::max<uint64_t>(size, 1), kDirectAlignment);
  if (capacity == capacity_) return;
  release();
  // Faulted in now rather than in the middle of a save.
  try {
    buffer_ = static_cast<std::byte*>(allocate_large(capacity, kDirectAlignment));
  } catch (const Error& e) {
    fail("cannot hold checkpoints for saving in the background: {}", e.what());
  }
  std::memset(buffer_, 0, capacity);
  capacity_ = capacity;
}

void DataImage::reserve(const std::vector<NamedTensor>& tensors) {
  allocate(data_file_layout(tensors).size);
}

void DataImage::fill(const std::vector<NamedTensor>& tensors) {
  DataFileLayout layout = data_file_layout(tensors);
  allocate(layout.size);
  pieces_.clear();
  uint64_t end = 0;  // of the previous tensor: the gaps and the padding are zeros
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Manifest::Entry& e = layout.tensors[i];
    std::memset(buffer_ + end, 0, e.offset - end);
    end = e.offset + e.nbytes;
    for (uint64_t at = 0; at < e.nbytes; at += kPieceBytes) {
      pieces_.push_back({i, at, std::min<uint64_t>(kPieceBytes, e.nbytes - at), 0});
    }
  }
  std::memset(buffer_ + end, 0, capacity_ - end);
  // The pieces are copied and checksummed on every core of the pool, each piece's checksum taken
  // while the piece is still in cache; the tensors' checksums are joined from them.
  const int64_t n = int64_t(pieces_.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < n; ++k) {
    Piece& p = pieces_[k];
    std::byte* to = buffer_ + layout.tensors[p.tensor].offset + p.begin;
    std::memcpy(to, static_cast<const std::byte*>(tensors[p.tensor].tensor.data) + p.begin, p.size);
    p.crc = crc32(to, p.size);
  }
  for (const Piece& p : pieces_) {
    uint32_t& crc = layout.tensors[p.tensor].crc32;
    crc = p.begin == 0 ? p.crc : crc32_combine(crc, p.crc, p.size);
  }
  layout_ = std::move(layout);
}

}  // namespace tessera::ckpt
