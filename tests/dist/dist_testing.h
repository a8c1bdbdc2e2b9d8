// Helpers shared by the distributed tests, which run on every rank of an mpirun job at once.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tests/expect_error.h"

namespace tessera::testing {

// Every operator new of the test binary, so that a test can check that warm operations allocate
// nothing (see dist_test_main.cc).
extern std::atomic<int64_t> allocations;

inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f32_to_bf16(x[i]);
  return y;
}

inline std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_f32(x[i]);
  return y;
}

// Per-rank counts with zeros in them: rank r gets 0 when r is odd, else r + 3.
inline std::vector<int64_t> uneven_counts(int size) {
  std::vector<int64_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r % 2 == 1 ? 0 : r + 3;
  return counts;
}

inline int64_t offset_of(const std::vector<int64_t>& counts, int rank) {
  return std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
}

}  // namespace tessera::testing
