// The bytes of one checkpoint data file held in memory, so that a background save can snapshot
// the state once and then hand the disk one buffer without copying it again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tessera/ckpt/manifest.h"
#include "tessera/core/tensor.h"

namespace tessera::ckpt {

// Every data file starts each tensor at a multiple of this many bytes, zeros in between.
constexpr uint64_t kTensorAlignment = 64;
// O_DIRECT wants buffers, lengths and file offsets aligned to the device's logical block, which is
// at most a page.
constexpr size_t kDirectAlignment = 4096;

constexpr uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// Where each tensor lies in a data file (names, shapes, dtypes, offsets, sizes; no file name and
// no checksum yet), and the file's size.
struct DataFileLayout {
  std::vector<Manifest::Entry> tensors;
  uint64_t size = 0;
};
DataFileLayout data_file_layout(const std::vector<NamedTensor>& tensors);

// A data file's image: the tensors at their layout's offsets in one page-aligned buffer, padded
// with zeros to a whole number of pages, allocated once and reused while the size stays the same.
class DataImage {
 public:
  DataImage() = default;
  ~DataImage();
  DataImage(const DataImage&) = delete;
  DataImage& operator=(const DataImage&) = delete;

  // Allocates the buffer for tensors of these sizes and touches every page, so the first save
  // does not pay for the page faults.
  void reserve(const std::vector<NamedTensor>& tensors);
  // Copies the tensors in on every thread of the pool, checksumming each piece while it is still
  // in cache.
  void fill(const std::vector<NamedTensor>& tensors);

  // The file's bytes followed by the zero padding: what an O_DIRECT write takes.
  std::span<const std::byte> padded_bytes() const { return {buffer_, capacity_}; }
  uint64_t size() const { return layout_.size; }
  // The tensors' listing with their checksums; each entry's file is left for the writer to name.
  const std::vector<Manifest::Entry>& entries() const { return layout_.tensors; }

 private:
  void allocate(uint64_t size);
  void release();

  struct Piece {
    size_t tensor;
    uint64_t begin, size;
    uint32_t crc;
  };
  DataFileLayout layout_;
  std::vector<Piece> pieces_;
  std::byte* buffer_ = nullptr;  // capacity_ bytes from allocate_large
  size_t capacity_ = 0;
};

}  // namespace tessera::ckpt
