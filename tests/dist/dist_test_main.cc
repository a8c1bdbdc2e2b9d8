// The distributed tests' main: every rank runs the whole suite. Rank 0 prints gtest's usual
// report and the other ranks only their failures, prefixed with their rank; any rank that fails
// exits non-zero, which fails the mpirun job.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <new>

#include "tessera/comm/world.h"
#include "tests/dist/dist_testing.h"

std::atomic<int64_t> tessera::testing::allocations{0};

void* operator new(std::size_t size) {
  tessera::testing::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  tessera::comm::Communicator& world = tessera::comm::init_world(argc, argv);
  const int rank = world.rank();
  // A test that leaves the ranks out of step ends the job in seconds rather than minutes.
  tessera::comm::set_timeout_seconds(30);
  ::testing::InitGoogleTest(&argc, argv);
  if (rank != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int result = RUN_ALL_TESTS();
  // Rank 0's report covers only its own tests; say when another rank's failed.
  int32_t failed_ranks = result != 0;
  world.all_reduce(&failed_ranks, 1, tessera::DType::i32);
  if (rank == 0 && failed_ranks > 0) {
    std::fprintf(stderr, "[rank 0] tests failed on %d of %d ranks; see the [rank R] lines\n",
                 failed_ranks, world.size());
  }
  return failed_ranks > 0 ? 1 : 0;
}
