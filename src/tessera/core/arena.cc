#include "tessera/core/arena.h"

#include <cstdlib>
#include <cstring>

namespace tessera {

void Arena::FreeDeleter::operator()(std::byte* p) const { std::free(p); }

Arena::Arena(size_t capacity_bytes) : capacity_(capacity_bytes), counting_(false) {
  size_t rounded = (capacity_bytes + kAlignment - 1) / kAlignment * kAlignment;
  auto* p = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment));
  check(p != nullptr, "out of memory: could not allocate an arena of {:.1f} MiB",
        capacity_bytes / 1048576.0);
  std::memset(p, 0, rounded);
  storage_.reset(p);
  base_ = p;
}

Arena Arena::over(std::byte* storage, size_t capacity_bytes) {
  Arena a;
  a.capacity_ = capacity_bytes;
  a.counting_ = false;
  a.base_ = storage;
  return a;
}

Tensor Arena::allocate(const Shape& shape, DType dtype) {
  Tensor t{nullptr, shape, dtype};
  size_t bytes = (t.nbytes() + kAlignment - 1) / kAlignment * kAlignment;
  if (!counting_) {
    check(used_ + bytes <= capacity_, "arena exhausted: {} bytes requested with {} of {} used",
          bytes, used_, capacity_);
    t.data = base_ + used_;
  }
  used_ += bytes;
  return t;
}

}  // namespace tessera
