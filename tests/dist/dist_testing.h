// Helpers shared by the distributed tests, which run on every rank of an mpirun job at once.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tessera/core/error.h"
#include "tests/expect_error.h"

namespace tessera::testing {

// Every operator new of the test binary, so that a test can check that warm operations allocate
// nothing (see dist_test_main.cc).
extern std::atomic<int64_t> allocations;

}  // namespace tessera::testing
