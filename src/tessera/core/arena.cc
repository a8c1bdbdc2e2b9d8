#include "tessera/core/arena.h"

#include <cstdlib>
#include <cstring>

#include "tessera/core/huge_pages.h"

namespace tessera {

void Arena::FreeDeleter::operator()(std::byte* p) const { free_large(p); }

Arena::Arena(size_t capacity_bytes) : capacity_(capacity_bytes), counting_(false) {
  const size_t rounded = (capacity_bytes + kAlignment - 1) / kAlignment * kAlignment;
  auto* p = static_cast<std::byte*>(allocate_large(rounded, kAlignment));
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
