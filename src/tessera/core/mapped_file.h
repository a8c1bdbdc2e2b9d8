#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace tessera {

// A whole file mapped read-only into memory, so that datasets far larger than RAM are paged in
// on demand and shared between processes through the page cache.
class MappedFile {
 public:
  // Throws an Error naming the path if it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera
