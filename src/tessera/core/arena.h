#pragma once

#include <cstddef>
#include <memory>

#include "tessera/core/tensor.h"

namespace tessera {

// One up-front allocation that hands out aligned tensors by bumping an offset. A model sizes its
// arena with a counting pass (Arena::counting()) and then allocates the real one once, so the
// training step never allocates.
class Arena {
 public:
  static constexpr size_t kAlignment = 64;

  static Arena counting() { return Arena(); }
  explicit Arena(size_t capacity_bytes);
  // An arena over zeroed memory the caller owns (a device's), which must outlive it.
  static Arena over(std::byte* storage, size_t capacity_bytes);

  // Zero-initialised storage for a tensor of this shape; a counting arena returns null data.
  Tensor allocate(const Shape& shape, DType dtype);
  size_t used() const { return used_; }
  size_t capacity() const { return capacity_; }

 private:
  Arena() = default;
  struct FreeDeleter {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte, FreeDeleter> storage_;  // null over the caller's memory
  std::byte* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  bool counting_ = true;
};

}  // namespace tessera
