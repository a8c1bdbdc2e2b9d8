#include "tessera/core/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "tessera/core/error.h"

namespace tessera {

namespace {
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
}  // namespace

void* allocate_large(size_t bytes, size_t alignment) {
  const bool huge = bytes >= kHugePageBytes;
  if (huge) alignment = kHugePageBytes;
  alignment = std::max(alignment, sizeof(void*));
  const size_t rounded = round_up(std::max<size_t>(bytes, 1), alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  check(p != nullptr, "out of host memory allocating {:.1f} MiB", double(bytes) / (1 << 20));
  // Advice only: a kernel without transparent huge pages leaves the range in small pages.
  if (huge) ::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void free_large(void* p) noexcept { std::free(p); }

}  // namespace tessera
