#include "tessera/comm/communicator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <vector>

#include "tessera/comm/single_communicator.h"
#include "tessera/comm/world.h"
#include "tessera/core/dtype.h"
#include "tests/dist/dist_testing.h"

namespace tessera::dist {
namespace {

using testing::expect_error;

using testing::from_bf16;
using testing::offset_of;
using testing::to_bf16;
using testing::uneven_counts;

TEST(Communicator, AllReduceSumsF32AndI32) {
  comm::Communicator& w = comm::world();
  const int n = w.size();
  std::vector<float> f(1000);
  std::vector<int32_t> i(1000);
  for (int k = 0; k < 1000; ++k) {
    f[k] = static_cast<float>((w.rank() + 1) * (k + 1));
    i[k] = (w.rank() + 1) * (k - 500);
  }
  w.all_reduce(f.data(), 1000, DType::f32);
  w.all_reduce(i.data(), 1000, DType::i32);
  for (int k = 0; k < 1000; ++k) {
    ASSERT_EQ(f[k], static_cast<float>((k + 1) * n * (n + 1) / 2)) << k;
    ASSERT_EQ(i[k], (k - 500) * n * (n + 1) / 2) << k;
  }
}

TEST(Communicator, AllReduceSumsDoublesWithoutLosingPrecision) {
  comm::Communicator& w = comm::world();
  // 1e15 + small values: exact in f64, lost in f32.
  std::vector<double> v = {w.rank() == 0 ? 1e15 : 0.0, 0.25 * (w.rank() + 1), -1.0};
  w.all_reduce(v.data(), 3);
  const int n = w.size();
  EXPECT_EQ(v[0], 1e15);
  EXPECT_EQ(v[1], 0.25 * n * (n + 1) / 2);
  EXPECT_EQ(v[2], -1.0 * n);
}

TEST(Communicator, Bf16AllReduceAccumulatesInF32) {
  comm::Communicator& w = comm::world();
  const int n = w.size();
  // Rank 0 holds a value a, every other rank a small b below half of a's bf16 spacing: adding
  // them one at a time in bf16 loses every b, and adding them in pairs keeps only some, while
  // an f32 sum keeps them all and rounds once.
  const std::vector<float> a = {1.0f, 2.0f, 3.0f, -1.0f, 256.0f};
  std::vector<float> b(a.size());
  std::vector<float> mine(a.size());
  std::vector<float> expected(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    b[k] = std::ldexp(std::fabs(a[k]), -8) * (k % 2 == 0 ? 1.0f : 0.75f);
    mine[k] = w.rank() == 0 ? a[k] : b[k];
    expected[k] = bf16_to_f32(f32_to_bf16(a[k] + (n - 1) * b[k]));
  }
  std::vector<uint16_t> data = to_bf16(mine);
  ASSERT_EQ(from_bf16(data), mine);  // the inputs are exact in bf16
  w.all_reduce(data.data(), static_cast<int64_t>(data.size()), DType::bf16);
  EXPECT_EQ(from_bf16(data), expected);
  if (n == 4) {
    // 1 + 3/256 rounds to 1 + 4/256; a bf16 chain would give 1 or 1 + 2/256.
    EXPECT_EQ(bf16_to_f32(data[0]), 1.015625f);
  }
}

TEST(Communicator, ReduceScatterWithVariableCountsAndZeros) {
  comm::Communicator& w = comm::world();
  const std::vector<int64_t> counts = uneven_counts(w.size());
  const int64_t total = offset_of(counts, w.size());
  const int64_t mine = counts[w.rank()];
  const int64_t offset = offset_of(counts, w.rank());
  const int n = w.size();
  // Small integers, exact in every dtype: element j of rank q is q + 1 + j % 5.
  auto value = [](int q, int64_t j) { return q + 1 + static_cast<int>(j % 5); };
  auto expected = [&](int64_t j) { return n * (n + 1) / 2 + n * static_cast<int>(j % 5); };

  std::vector<float> f(total);
  std::vector<int32_t> i(total);
  for (int64_t j = 0; j < total; ++j) {
    f[j] = static_cast<float>(value(w.rank(), j));
    i[j] = value(w.rank(), j);
  }
  std::vector<uint16_t> h = to_bf16(f);
  std::vector<float> f_out(mine, -1);
  std::vector<int32_t> i_out(mine, -1);
  std::vector<uint16_t> h_out(mine, 0);
  w.reduce_scatter(f.data(), f_out.data(), counts, DType::f32);
  w.reduce_scatter(i.data(), i_out.data(), counts, DType::i32);
  w.reduce_scatter(h.data(), h_out.data(), counts, DType::bf16);
  for (int64_t j = 0; j < mine; ++j) {
    EXPECT_EQ(f_out[j], static_cast<float>(expected(offset + j))) << j;
    EXPECT_EQ(i_out[j], expected(offset + j)) << j;
    EXPECT_EQ(bf16_to_f32(h_out[j]), static_cast<float>(expected(offset + j))) << j;
  }
}

TEST(Communicator, ReduceScatterOntoOneRank) {
  comm::Communicator& w = comm::world();
  std::vector<int64_t> counts(w.size(), 0);
  counts[w.size() - 1] = 7;
  std::vector<float> send(7, 1.5f);
  std::vector<float> recv(7, 0.0f);
  w.reduce_scatter(send.data(), recv.data(), counts, DType::f32);
  if (w.rank() == w.size() - 1) {
    EXPECT_EQ(recv, std::vector<float>(7, 1.5f * w.size()));
  } else {
    EXPECT_EQ(recv, std::vector<float>(7, 0.0f));  // nothing was written
  }
}

TEST(Communicator, AllGatherWithVariableCountsAndZeros) {
  comm::Communicator& w = comm::world();
  const std::vector<int64_t> counts = uneven_counts(w.size());
  const int64_t total = offset_of(counts, w.size());
  const int64_t mine = counts[w.rank()];
  auto value = [](int q, int64_t j) { return q * 8 + static_cast<int>(j); };
  std::vector<float> f(mine);
  std::vector<int32_t> i(mine);
  for (int64_t j = 0; j < mine; ++j) {
    f[j] = static_cast<float>(value(w.rank(), j));
    i[j] = value(w.rank(), j);
  }
  std::vector<uint16_t> h = to_bf16(f);
  std::vector<float> f_all(total);
  std::vector<int32_t> i_all(total);
  std::vector<uint16_t> h_all(total);
  w.all_gather(f.data(), f_all.data(), counts, DType::f32);
  w.all_gather(i.data(), i_all.data(), counts, DType::i32);
  w.all_gather(h.data(), h_all.data(), counts, DType::bf16);
  for (int q = 0; q < w.size(); ++q) {
    for (int64_t j = 0; j < counts[q]; ++j) {
      const int64_t at = offset_of(counts, q) + j;
      EXPECT_EQ(f_all[at], static_cast<float>(value(q, j)));
      EXPECT_EQ(i_all[at], value(q, j));
      EXPECT_EQ(bf16_to_f32(h_all[at]), static_cast<float>(value(q, j)));
    }
  }
}

TEST(Communicator, AllGatherInPlace) {
  comm::Communicator& w = comm::world();
  const std::vector<int64_t> counts = uneven_counts(w.size());
  std::vector<float> all(offset_of(counts, w.size()), -1.0f);
  float* own = all.data() + offset_of(counts, w.rank());
  for (int64_t j = 0; j < counts[w.rank()]; ++j) own[j] = static_cast<float>(w.rank() * 8 + j);
  w.all_gather(own, all.data(), counts, DType::f32);
  for (int q = 0; q < w.size(); ++q) {
    for (int64_t j = 0; j < counts[q]; ++j) {
      EXPECT_EQ(all[offset_of(counts, q) + j], static_cast<float>(q * 8 + j));
    }
  }
}

TEST(Communicator, BroadcastFromTheLastRank) {
  comm::Communicator& w = comm::world();
  const int root = w.size() - 1;
  std::vector<float> f(5, w.rank() == root ? 2.5f : 0.0f);
  std::vector<uint16_t> h(5, f32_to_bf16(w.rank() == root ? -3.0f : 0.0f));
  std::vector<int32_t> i(5, w.rank() == root ? 42 : 0);
  w.broadcast(f.data(), 5, DType::f32, root);
  w.broadcast(h.data(), 5, DType::bf16, root);
  w.broadcast(i.data(), 5, DType::i32, root);
  EXPECT_EQ(f, std::vector<float>(5, 2.5f));
  EXPECT_EQ(from_bf16(h), std::vector<float>(5, -3.0f));
  EXPECT_EQ(i, std::vector<int32_t>(5, 42));
}

TEST(Communicator, AllToAllTransposesBlocks) {
  comm::Communicator& w = comm::world();
  const int n = w.size();
  const int64_t c = 3;
  std::vector<int32_t> send(n * c);
  std::vector<float> send_f(n * c);
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < c; ++j) {
      send[r * c + j] = w.rank() * 100 + r * 10 + static_cast<int>(j);
      send_f[r * c + j] = static_cast<float>(send[r * c + j]);
    }
  }
  std::vector<uint16_t> send_h = to_bf16(send_f);
  std::vector<int32_t> recv(n * c);
  std::vector<float> recv_f(n * c);
  std::vector<uint16_t> recv_h(n * c);
  w.all_to_all(send.data(), recv.data(), c, DType::i32);
  w.all_to_all(send_f.data(), recv_f.data(), c, DType::f32);
  w.all_to_all(send_h.data(), recv_h.data(), c, DType::bf16);
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < c; ++j) {
      const int want = r * 100 + w.rank() * 10 + static_cast<int>(j);
      EXPECT_EQ(recv[r * c + j], want);
      EXPECT_EQ(recv_f[r * c + j], static_cast<float>(want));
      EXPECT_EQ(bf16_to_f32(recv_h[r * c + j]), bf16_to_f32(f32_to_bf16(static_cast<float>(want))));
    }
  }
}

TEST(Communicator, SendRecvAroundARing) {
  comm::Communicator& w = comm::world();
  if (w.size() == 1) GTEST_SKIP() << "needs two ranks";
  const int next = (w.rank() + 1) % w.size();
  const int prev = (w.rank() + w.size() - 1) % w.size();
  std::vector<float> out(6, static_cast<float>(w.rank()));
  std::vector<float> in(6, -1.0f);
  std::vector<uint16_t> out_h(2, f32_to_bf16(w.rank() + 0.5f));
  std::vector<uint16_t> in_h(2, 0);
  // Two messages between the same pair, told apart by tag and received in the other order.
  comm::Request r_h = w.start_recv(in_h.data(), 2, DType::bf16, prev, 2);
  comm::Request r = w.start_recv(in.data(), 6, DType::f32, prev, 1);
  w.send(out.data(), 6, DType::f32, next, 1);
  w.send(out_h.data(), 2, DType::bf16, next, 2);
  w.wait(r);
  w.wait(r_h);
  EXPECT_EQ(in, std::vector<float>(6, static_cast<float>(prev)));
  EXPECT_EQ(from_bf16(in_h), std::vector<float>(2, prev + 0.5f));
}

TEST(Communicator, NonBlockingOperationsOverlapAndCompleteInAnyOrder) {
  comm::Communicator& w = comm::world();
  const int n = w.size();
  const std::vector<int64_t> counts = uneven_counts(n);
  const int64_t total = offset_of(counts, n);
  std::vector<float> a(64, 1.0f);
  std::vector<uint16_t> b(33, f32_to_bf16(2.0f));
  std::vector<float> rs_in(total, 1.0f);
  std::vector<float> rs_out(counts[w.rank()]);
  std::vector<int32_t> ag_in(counts[w.rank()], w.rank());
  std::vector<int32_t> ag_out(total);
  comm::Request ra = w.start_all_reduce(a.data(), 64, DType::f32);
  comm::Request rb = w.start_all_reduce(b.data(), 33, DType::bf16);
  comm::Request rs = w.start_reduce_scatter(rs_in.data(), rs_out.data(), counts, DType::f32);
  comm::Request rg = w.start_all_gather(ag_in.data(), ag_out.data(), counts, DType::i32);
  EXPECT_TRUE(ra.pending());
  w.wait(rg);
  w.wait(rb);
  while (!w.test(rs)) {
  }
  w.wait(ra);
  EXPECT_FALSE(ra.pending());
  EXPECT_EQ(a, std::vector<float>(64, static_cast<float>(n)));
  EXPECT_EQ(from_bf16(b), std::vector<float>(33, 2.0f * n));
  EXPECT_EQ(rs_out, std::vector<float>(counts[w.rank()], static_cast<float>(n)));
  for (int q = 0; q < n; ++q) {
    for (int64_t j = 0; j < counts[q]; ++j) EXPECT_EQ(ag_out[offset_of(counts, q) + j], q);
  }
}

TEST(Communicator, WarmOperationsDoNotAllocate) {
  comm::Communicator& w = comm::world();
  const std::vector<int64_t> counts = uneven_counts(w.size());
  const int64_t total = offset_of(counts, w.size());
  std::vector<uint16_t> grads(total, f32_to_bf16(1.0f));
  std::vector<uint16_t> shard(counts[w.rank()]);
  std::vector<float> params(total);
  std::vector<float> loss(1, 1.0f);
  std::vector<uint16_t> acts(16, f32_to_bf16(1.0f));
  const int next = (w.rank() + 1) % w.size();
  const int prev = (w.rank() + w.size() - 1) % w.size();
  std::vector<float> out(4, 1.0f);
  std::vector<float> in(4);
  const bool p2p = w.size() > 1;
  std::vector<double> metrics(2, 1.0);
  std::vector<int32_t> spread(2 * w.size(), 1);
  std::vector<int32_t> gathered(2 * w.size());
  const int partner = w.rank() ^ 1;
  const bool paired = partner < w.size();
  float* own_params = params.data() + offset_of(counts, w.rank());
  auto step = [&] {
    comm::Request r[5];
    r[0] = w.start_reduce_scatter(grads.data(), shard.data(), counts, DType::bf16);
    r[1] = w.start_all_reduce(acts.data(), 16, DType::bf16);
    r[2] = w.start_all_gather(own_params, params.data(), counts, DType::f32);
    if (p2p) {
      r[3] = w.start_recv(in.data(), 4, DType::f32, prev, 3);
      r[4] = w.start_send(out.data(), 4, DType::f32, next, 3);
    }
    for (int k = p2p ? 4 : 2; k >= 0; --k) w.wait(r[k]);
    w.reduce_scatter(grads.data(), shard.data(), counts, DType::bf16);
    w.all_reduce(acts.data(), 16, DType::bf16);
    w.all_gather(own_params, params.data(), counts, DType::f32);
    w.all_reduce(loss.data(), 1, DType::f32);
    w.all_reduce(metrics.data(), 2);
    w.broadcast(params.data(), total, DType::f32, 0);
    w.all_to_all(spread.data(), gathered.data(), 2, DType::i32);
    if (paired) {
      // The lower rank of each pair sends first, so neither waits in a send for the other to
      // receive.
      if (w.rank() < partner) w.send(out.data(), 4, DType::f32, partner, 4);
      w.recv(in.data(), 4, DType::f32, partner, 4);
      if (w.rank() > partner) w.send(out.data(), 4, DType::f32, partner, 4);
    }
    w.barrier();
  };
  step();
  const int64_t before = testing::allocations.load();
  for (int k = 0; k < 10; ++k) step();
  EXPECT_EQ(testing::allocations.load() - before, 0);
}

TEST(Communicator, SplitGroupsRanksByColorAndOrdersThemByKey) {
  comm::Communicator& w = comm::world();
  // Even and odd ranks, each group in reverse rank order.
  std::unique_ptr<comm::Communicator> group = w.split(w.rank() % 2, -w.rank());
  const int members = (w.size() + 1 - w.rank() % 2) / 2;
  ASSERT_EQ(group->size(), members);
  std::vector<int32_t> ranks(members);
  std::vector<int64_t> ones(members, 1);
  const int32_t me = w.rank();
  group->all_gather(&me, ranks.data(), ones, DType::i32);
  const int parity = w.rank() % 2;
  const int highest = parity + 2 * ((w.size() - 1 - parity) / 2);
  for (int k = 0; k < members; ++k) EXPECT_EQ(ranks[k], highest - 2 * k);
  EXPECT_EQ(ranks[group->rank()], w.rank());
}

TEST(Communicator, RejectsBadArgumentsOnEveryRank) {
  comm::Communicator& w = comm::world();
  float x[4] = {};
  const std::vector<int64_t> wrong(w.size() + 1, 1);
  expect_error([&] { w.reduce_scatter(x, x, wrong, DType::f32); },
               {"reduce_scatter", std::to_string(w.size() + 1) + " per-rank counts"});
  std::vector<int64_t> negative(w.size(), 0);
  negative[0] = -1;
  expect_error([&] { w.all_gather(x, x, negative, DType::f32); }, {"rank 0 must be >= 0"});
  expect_error([&] { w.all_reduce(x, int64_t{1} << 31, DType::f32); }, {"2^31-1", "split"});
  expect_error([&] { w.broadcast(x, 4, DType::f32, w.size()); }, {"root rank"});
  expect_error([&] { w.send(x, 4, DType::f32, 0, -1); }, {"tag -1"});
  expect_error([&] { w.recv(x, 4, DType::f32, -1, 0); }, {"source rank -1"});
  const std::vector<int64_t> all(w.size(), 1);
  std::vector<float> y(w.size());
  expect_error([&] { w.all_to_all(y.data(), y.data(), 1, DType::f32); }, {"overlap"});
  expect_error([&] { w.reduce_scatter(y.data(), y.data() + w.rank(), all, DType::f32); },
               {"overlaps"});
  expect_error([&] { w.split(-1, 0); }, {"color"});
}

TEST(Communicator, RequestsCompleteOnceAndOnlyOnTheirCommunicator) {
  comm::Communicator& w = comm::world();
  float x = 1.0f;
  comm::Request r = w.start_all_reduce(&x, 1, DType::f32);
  const comm::Request copy = r;
  comm::SingleCommunicator other;
  comm::Request stray = copy;
  expect_error([&] { other.wait(stray); }, {"another communicator"});
  w.wait(r);
  expect_error([&] { w.wait(r); }, {"not pending"});
  if (dynamic_cast<comm::SingleCommunicator*>(&w) == nullptr) {
    comm::Request again = copy;
    expect_error([&] { w.wait(again); }, {"already completed"});
  }
}

TEST(Communicator, MessageSizeMismatchIsAnErrorNamingTheOperation) {
  comm::Communicator& w = comm::world();
  if (w.size() == 1) GTEST_SKIP() << "needs two ranks";
  std::vector<float> buffer(8, 1.0f);
  if (w.rank() == 0) {
    w.send(buffer.data(), 8, DType::f32, 1, 5);  // more than rank 1 expects
    w.send(buffer.data(), 2, DType::f32, 1, 6);  // fewer than rank 1 expects
  } else if (w.rank() == 1) {
    expect_error([&] { w.recv(buffer.data(), 4, DType::f32, 0, 5); },
                 {"MPI error in recv of 4 f32 elements from rank 0 (tag 5) on rank 1", "TRUNC"});
    expect_error([&] { w.recv(buffer.data(), 4, DType::f32, 0, 6); },
                 {"recv of 4 f32 elements from rank 0 (tag 6) on rank 1 received 2 elements"});
  }
  w.barrier();
}

TEST(Communicator, SingleRankHasNoPeers) {
  comm::SingleCommunicator single;
  float x[2] = {1.0f, 2.0f};
  expect_error([&] { single.send(x, 2, DType::f32, 0, 0); },
               {"send of 2 f32 elements to rank 0 (tag 0) in a single-rank job", "mpirun"});
  expect_error([&] { single.start_recv(x, 2, DType::f32, 0, 0); }, {"recv", "single-rank"});
  single.all_reduce(x, 2, DType::f32);
  EXPECT_EQ(x[1], 2.0f);
}

TEST(Launch, OnlyALaunchedProcessUsesMpi) {
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  EXPECT_EQ(dynamic_cast<comm::SingleCommunicator*>(&comm::world()) == nullptr, launched);
}

TEST(Launch, TimeoutMustBePositive) {
  const double before = comm::timeout_seconds();
  expect_error([] { comm::set_timeout_seconds(0); }, {"dist.timeout_s", "> 0"});
  expect_error([] { comm::set_timeout_seconds(NAN); }, {"dist.timeout_s"});
  comm::set_timeout_seconds(12.5);
  EXPECT_EQ(comm::timeout_seconds(), 12.5);
  comm::set_timeout_seconds(before);
}

}  // namespace
}  // namespace tessera::dist
