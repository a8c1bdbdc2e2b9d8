// Large buffers in transparent huge pages. Debian's kernel policy ("madvise") gives 2 MiB pages
// only to ranges that ask for them; everything else is faulted in 4 KiB at a time, which on the
// virtual machines we measured cost about 14 us a fault (first touch of 420 MB: 1.4 s, against
// 0.04 s in huge pages), and a kernel streaming through it misses the TLB every 4 KiB.
#pragma once

#include <cstddef>
#include <vector>

namespace tessera {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Uninitialised memory for `bytes` at `alignment` (a power of two up to kHugePageBytes), asked
// for in huge pages from kHugePageBytes on; freed with free_large. Throws when memory is
// exhausted.
void* allocate_large(size_t bytes, size_t alignment = 64);
void free_large(void* p) noexcept;

// A standard allocator over allocate_large, for vectors of many megabytes.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding is implicit by contract
  T* allocate(size_t n) { return static_cast<T*>(allocate_large(n * sizeof(T), alignof(T))); }
  void deallocate(T* p, size_t) noexcept;
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using LargeVector = std::vector<T, HugePageAllocator<T>>;

template <typename T>
void HugePageAllocator<T>::deallocate(T* p, size_t) noexcept {
  free_large(p);
}

}  // namespace tessera
