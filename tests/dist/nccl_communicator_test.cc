// The NCCL communicator's collectives on device buffers, checked against what the contract of
// communicator.h promises and, for bf16 sums, against the MPI communicator on the same data. Every
// rank needs a CUDA device of its own; without one the tests skip, visibly, on every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/world.h"
#include "tessera/core/dtype.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"
#include "tests/dist/dist_testing.h"
#if TESSERA_CUDA
#include "tessera/comm/cuda/nccl_communicator.h"
#endif

namespace tessera::dist {
namespace {

#if TESSERA_CUDA

using testing::expect_error;

using testing::from_bf16;
using testing::offset_of;
using testing::to_bf16;
using testing::uneven_counts;

// This rank's index among the ranks on its host, and how many there are, from the host names:
// NCCL refuses two ranks of one communicator on one device, so each needs a device of its own.
void local_rank_and_size(comm::Communicator& w, int& local_rank, int& local_size) {
  constexpr int kWords = 16;
  std::vector<int32_t> mine(kWords, 0);
  char name[kWords * sizeof(int32_t)] = {};
  gethostname(name, sizeof(name) - 1);
  std::memcpy(mine.data(), name, sizeof(name));
  std::vector<int32_t> all(size_t(kWords) * w.size());
  const std::vector<int64_t> counts(w.size(), kWords);
  w.all_gather(mine.data(), all.data(), counts, DType::i32);
  local_rank = 0;
  local_size = 0;
  for (int r = 0; r < w.size(); ++r) {
    if (std::equal(mine.begin(), mine.end(), all.begin() + int64_t(r) * kWords)) {
      ++local_size;
      if (r < w.rank()) ++local_rank;
    }
  }
}

// One NCCL communicator over the world, on this rank's device, shared by the suite's tests: the
// skip decision and the set-up are collective, so every rank makes them together.
class Nccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    comm::Communicator& w = comm::world();
    const int devices = kernels::cuda_device_count();
    int local_rank = 0, local_size = 0;
    local_rank_and_size(w, local_rank, local_size);
    int32_t lacking[2] = {devices == 0, devices > 0 && local_size > devices};
    w.all_reduce(lacking, 2, DType::i32);
    if (lacking[0] > 0) {
      const std::string reason = devices == 0
                                     ? kernels::cuda_unavailable_reason()
                                     : std::to_string(lacking[0]) + " other ranks have none";
      skip_ = "SKIPPED: no CUDA device (" + reason + ")";
      return;
    }
    if (lacking[1] > 0) {
      skip_ = "SKIPPED: ranks outnumber the CUDA devices of their host (" +
              std::to_string(local_size) + " ranks, " + std::to_string(devices) +
              " devices here); NCCL needs a device per rank";
      return;
    }
    try {
      device_ = std::make_unique<kernels::DeviceContext>(
          kernels::Device{kernels::DeviceKind::kCuda, local_rank % devices});
      nccl_ = comm::make_nccl_communicator(w, device_->context(), "world-nccl");
    } catch (const Error& e) {
      error_ = e.what();
    }
  }
  static void TearDownTestSuite() {
    nccl_.reset();  // before the device context it runs on
    device_.reset();
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(error_.empty()) << error_;
  }

  static const kernels::Context& ctx() { return device_->context(); }
  static comm::Communicator& nccl() { return *nccl_; }

  template <typename T>
  static kernels::DeviceArray<T> upload(const std::vector<T>& host) {
    kernels::DeviceArray<T> d(ctx(), int64_t(host.size()));
    kernels::copy_to_device(ctx(), d.data(), host.data(), host.size() * sizeof(T));
    return d;
  }
  template <typename T>
  static std::vector<T> download(const kernels::DeviceArray<T>& d) {
    std::vector<T> host(size_t(d.size()));
    kernels::copy_to_host(ctx(), host.data(), d.data(), host.size() * sizeof(T));
    return host;
  }

  static inline std::string skip_;
  static inline std::string error_;
  static inline std::unique_ptr<kernels::DeviceContext> device_;
  static inline std::unique_ptr<comm::Communicator> nccl_;
};

TEST_F(Nccl, AllReduceSumsF32AndI32) {
  comm::Communicator& c = nccl();
  const int n = c.size();
  std::vector<float> f(1000);
  std::vector<int32_t> i(1000);
  for (int k = 0; k < 1000; ++k) {
    f[k] = static_cast<float>((c.rank() + 1) * (k + 1));
    i[k] = (c.rank() + 1) * (k - 500);
  }
  kernels::DeviceArray<float> df = upload(f);
  kernels::DeviceArray<int32_t> di = upload(i);
  c.all_reduce(df.data(), 1000, DType::f32);
  c.all_reduce(di.data(), 1000, DType::i32);
  c.all_reduce(df.data(), 0, DType::f32);  // nothing to sum
  f = download(df);
  i = download(di);
  for (int k = 0; k < 1000; ++k) {
    ASSERT_EQ(f[k], static_cast<float>((k + 1) * n * (n + 1) / 2)) << k;
    ASSERT_EQ(i[k], (k - 500) * n * (n + 1) / 2) << k;
  }
}

TEST_F(Nccl, Bf16AllReduceSumsInF32LikeTheMpiCommunicator) {
  comm::Communicator& c = nccl();
  const int n = c.size();
  // Rank 0 holds a, every other rank a small b below half of a's bf16 spacing: a bf16 chain of
  // sums would lose every b, an f32 sum keeps them and rounds once.
  const std::vector<float> a = {1.0f, 2.0f, 3.0f, -1.0f, 256.0f};
  std::vector<float> mine(a.size()), expected(a.size());
  for (size_t k = 0; k < a.size(); ++k) {
    const float b = std::ldexp(std::fabs(a[k]), -8) * (k % 2 == 0 ? 1.0f : 0.75f);
    mine[k] = c.rank() == 0 ? a[k] : b;
    expected[k] = bf16_to_f32(f32_to_bf16(a[k] + (n - 1) * b));
  }
  // And a long tail of values whose f32 sums are exact, so that the order NCCL adds them in
  // cannot matter.
  for (int k = 0; k < 4099; ++k) {
    mine.push_back(float(k % 13 - 6) * 0.125f + float(c.rank()) * 0.0078125f);
  }
  std::vector<uint16_t> host = to_bf16(mine);
  ASSERT_EQ(from_bf16(host), mine);  // the inputs are exact in bf16
  kernels::DeviceArray<uint16_t> device = upload(host);
  c.all_reduce(device.data(), device.size(), DType::bf16);
  comm::world().all_reduce(host.data(), int64_t(host.size()), DType::bf16);
  const std::vector<uint16_t> got = download(device);
  EXPECT_EQ(got, host);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_EQ(bf16_to_f32(got[k]), expected[k]) << k;
  if (n == 4) {
    EXPECT_EQ(bf16_to_f32(got[0]), 1.015625f);  // 1 + 3/256 rounds to 1 + 4/256
  }
}

TEST_F(Nccl, ReduceScatterWithUnevenAndEqualCounts) {
  comm::Communicator& c = nccl();
  const int n = c.size();
  auto value = [](int q, int64_t j) { return q + 1 + static_cast<int>(j % 5); };
  auto expected = [&](int64_t j) { return n * (n + 1) / 2 + n * static_cast<int>(j % 5); };
  // Uneven with zeros (grouped reductions), then equal (ncclReduceScatter).
  for (const std::vector<int64_t>& counts : {uneven_counts(n), std::vector<int64_t>(n, 4)}) {
    const int64_t total = offset_of(counts, n);
    const int64_t mine = counts[c.rank()];
    const int64_t offset = offset_of(counts, c.rank());
    std::vector<float> f(total);
    std::vector<int32_t> i(total);
    for (int64_t j = 0; j < total; ++j) {
      f[j] = static_cast<float>(value(c.rank(), j));
      i[j] = value(c.rank(), j);
    }
    kernels::DeviceArray<float> df = upload(f);
    kernels::DeviceArray<int32_t> di = upload(i);
    kernels::DeviceArray<uint16_t> dh = upload(to_bf16(f));
    kernels::DeviceArray<float> f_out(ctx(), mine);
    kernels::DeviceArray<int32_t> i_out(ctx(), mine);
    kernels::DeviceArray<uint16_t> h_out(ctx(), mine);
    c.reduce_scatter(df.data(), f_out.data(), counts, DType::f32);
    c.reduce_scatter(di.data(), i_out.data(), counts, DType::i32);
    c.reduce_scatter(dh.data(), h_out.data(), counts, DType::bf16);
    const std::vector<float> f_got = download(f_out);
    const std::vector<int32_t> i_got = download(i_out);
    const std::vector<float> h_got = from_bf16(download(h_out));
    for (int64_t j = 0; j < mine; ++j) {
      EXPECT_EQ(f_got[j], static_cast<float>(expected(offset + j))) << j;
      EXPECT_EQ(i_got[j], expected(offset + j)) << j;
      EXPECT_EQ(h_got[j], static_cast<float>(expected(offset + j))) << j;
    }
  }
}

TEST_F(Nccl, ReduceScatterOntoOneRankLeavesTheOthersAlone) {
  comm::Communicator& c = nccl();
  std::vector<int64_t> counts(c.size(), 0);
  counts[c.size() - 1] = 7;
  kernels::DeviceArray<float> send = upload(std::vector<float>(7, 1.5f));
  kernels::DeviceArray<float> recv = upload(std::vector<float>(7, -1.0f));
  c.reduce_scatter(send.data(), recv.data(), counts, DType::f32);
  const float want = c.rank() == c.size() - 1 ? 1.5f * c.size() : -1.0f;
  EXPECT_EQ(download(recv), std::vector<float>(7, want));
}

TEST_F(Nccl, AllGatherWithUnevenAndEqualCountsAndInPlace) {
  comm::Communicator& c = nccl();
  const int n = c.size();
  auto value = [](int q, int64_t j) { return q * 8 + static_cast<int>(j); };
  for (const std::vector<int64_t>& counts : {uneven_counts(n), std::vector<int64_t>(n, 3)}) {
    const int64_t total = offset_of(counts, n);
    const int64_t mine = counts[c.rank()];
    std::vector<float> f(mine);
    for (int64_t j = 0; j < mine; ++j) f[j] = static_cast<float>(value(c.rank(), j));
    kernels::DeviceArray<float> df = upload(f);
    kernels::DeviceArray<uint16_t> dh = upload(to_bf16(f));
    kernels::DeviceArray<float> f_all(ctx(), total);
    kernels::DeviceArray<uint16_t> h_all(ctx(), total);
    c.all_gather(df.data(), f_all.data(), counts, DType::f32);
    c.all_gather(dh.data(), h_all.data(), counts, DType::bf16);
    // In place: this rank's part already sits in the output.
    std::vector<float> prefilled(total, -1.0f);
    std::copy(f.begin(), f.end(), prefilled.begin() + offset_of(counts, c.rank()));
    kernels::DeviceArray<float> in_place = upload(prefilled);
    c.all_gather(in_place.data() + offset_of(counts, c.rank()), in_place.data(), counts,
                 DType::f32);
    const std::vector<float> f_got = download(f_all);
    const std::vector<float> h_got = from_bf16(download(h_all));
    const std::vector<float> p_got = download(in_place);
    for (int q = 0; q < n; ++q) {
      for (int64_t j = 0; j < counts[q]; ++j) {
        const int64_t at = offset_of(counts, q) + j;
        EXPECT_EQ(f_got[at], static_cast<float>(value(q, j))) << at;
        EXPECT_EQ(h_got[at], static_cast<float>(value(q, j))) << at;
        EXPECT_EQ(p_got[at], static_cast<float>(value(q, j))) << at;
      }
    }
  }
}

TEST_F(Nccl, BroadcastFromTheLastRank) {
  comm::Communicator& c = nccl();
  const int root = c.size() - 1;
  kernels::DeviceArray<float> f = upload(std::vector<float>(5, c.rank() == root ? 2.5f : 0.0f));
  kernels::DeviceArray<uint16_t> h =
      upload(std::vector<uint16_t>(5, f32_to_bf16(c.rank() == root ? -3.0f : 0.0f)));
  kernels::DeviceArray<int32_t> i = upload(std::vector<int32_t>(5, c.rank() == root ? 42 : 0));
  c.broadcast(f.data(), 5, DType::f32, root);
  c.broadcast(h.data(), 5, DType::bf16, root);
  c.broadcast(i.data(), 5, DType::i32, root);
  EXPECT_EQ(download(f), std::vector<float>(5, 2.5f));
  EXPECT_EQ(from_bf16(download(h)), std::vector<float>(5, -3.0f));
  EXPECT_EQ(download(i), std::vector<int32_t>(5, 42));
}

TEST_F(Nccl, AllToAllAndAllToAllV) {
  comm::Communicator& c = nccl();
  const int n = c.size();
  const int me = c.rank();
  const int64_t per = 3;
  std::vector<int32_t> send(n * per);
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < per; ++j) send[r * per + j] = me * 100 + r * 10 + int(j);
  }
  kernels::DeviceArray<int32_t> d_send = upload(send);
  kernels::DeviceArray<int32_t> d_recv(ctx(), n * per);
  c.all_to_all(d_send.data(), d_recv.data(), per, DType::i32);
  const std::vector<int32_t> got = download(d_recv);
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < per; ++j) EXPECT_EQ(got[r * per + j], r * 100 + me * 10 + int(j));
  }

  // Rank s sends (s + r) % 3 elements to rank r, zeros among them.
  std::vector<int64_t> send_counts(n), recv_counts(n);
  for (int r = 0; r < n; ++r) {
    send_counts[r] = (me + r) % 3;
    recv_counts[r] = (r + me) % 3;
  }
  std::vector<float> v_send;
  for (int r = 0; r < n; ++r) {
    for (int64_t j = 0; j < send_counts[r]; ++j) v_send.push_back(float(me * 100 + r * 10 + j));
  }
  kernels::DeviceArray<float> dv_send = upload(v_send);
  kernels::DeviceArray<float> dv_recv(ctx(), offset_of(recv_counts, n));
  c.all_to_all_v(dv_send.data(), send_counts, dv_recv.data(), recv_counts, DType::f32);
  const std::vector<float> v_got = download(dv_recv);
  for (int s = 0; s < n; ++s) {
    for (int64_t j = 0; j < recv_counts[s]; ++j) {
      EXPECT_EQ(v_got[offset_of(recv_counts, s) + j], float(s * 100 + me * 10 + j)) << s;
    }
  }
}

TEST_F(Nccl, SendRecvAroundARingAndBetweenPairs) {
  comm::Communicator& c = nccl();
  if (c.size() == 1) GTEST_SKIP() << "needs two ranks";
  const int next = (c.rank() + 1) % c.size();
  const int prev = (c.rank() + c.size() - 1) % c.size();
  // A receive started, then a blocking send: NCCL runs them as one group, or the ring would
  // deadlock with every rank's stream stuck in its receive.
  kernels::DeviceArray<float> out = upload(std::vector<float>(6, float(c.rank())));
  kernels::DeviceArray<float> in = upload(std::vector<float>(6, -1.0f));
  comm::Request r = c.start_recv(in.data(), 6, DType::f32, prev, 1);
  c.send(out.data(), 6, DType::f32, next, 1);
  c.wait(r);
  EXPECT_EQ(download(in), std::vector<float>(6, float(prev)));

  // Two messages between the same pair arrive in the order they were sent (NCCL has no tags).
  kernels::DeviceArray<uint16_t> out_h = upload(std::vector<uint16_t>(2, f32_to_bf16(0.5f)));
  kernels::DeviceArray<uint16_t> in_h(ctx(), 2);
  comm::Request first = c.start_recv(in.data(), 6, DType::f32, prev, 1);
  comm::Request second = c.start_recv(in_h.data(), 2, DType::bf16, prev, 2);
  comm::Request sent_first = c.start_send(out.data(), 6, DType::f32, next, 1);
  comm::Request sent_second = c.start_send(out_h.data(), 2, DType::bf16, next, 2);
  c.wait(second);
  c.wait(sent_second);
  while (!c.test(first)) {
  }
  c.wait(sent_first);
  EXPECT_EQ(download(in), std::vector<float>(6, float(prev)));
  EXPECT_EQ(from_bf16(download(in_h)), std::vector<float>(2, 0.5f));

  // Blocking pairs: the lower rank of each sends first.
  const int partner = c.rank() ^ 1;
  if (partner < c.size()) {
    kernels::DeviceArray<int32_t> mine = upload(std::vector<int32_t>(4, c.rank()));
    kernels::DeviceArray<int32_t> theirs(ctx(), 4);
    if (c.rank() < partner) c.send(mine.data(), 4, DType::i32, partner, 4);
    c.recv(theirs.data(), 4, DType::i32, partner, 4);
    if (c.rank() > partner) c.send(mine.data(), 4, DType::i32, partner, 4);
    EXPECT_EQ(download(theirs), std::vector<int32_t>(4, partner));
  }
  c.barrier();
}

TEST_F(Nccl, SplitGroupsRanksByColorAndOrdersThemByKey) {
  comm::Communicator& c = nccl();
  std::unique_ptr<comm::Communicator> group = c.split(c.rank() % 2, -c.rank(), "parity");
  const int members = (c.size() + 1 - c.rank() % 2) / 2;
  ASSERT_EQ(group->size(), members);
  kernels::DeviceArray<int32_t> me = upload(std::vector<int32_t>(1, c.rank()));
  kernels::DeviceArray<int32_t> ranks(ctx(), members);
  group->all_gather(me.data(), ranks.data(), std::vector<int64_t>(members, 1), DType::i32);
  const std::vector<int32_t> got = download(ranks);
  const int parity = c.rank() % 2;
  const int highest = parity + 2 * ((c.size() - 1 - parity) / 2);
  for (int k = 0; k < members; ++k) EXPECT_EQ(got[k], highest - 2 * k);
  EXPECT_EQ(got[group->rank()], c.rank());
  kernels::DeviceArray<float> ones = upload(std::vector<float>(3, 1.0f));
  group->all_reduce(ones.data(), 3, DType::f32);
  EXPECT_EQ(download(ones), std::vector<float>(3, float(members)));
  double metric = 1.0;
  group->all_reduce(&metric, 1);  // host doubles, through the host communicator
  EXPECT_EQ(metric, double(members));
  group->barrier();
}

TEST_F(Nccl, NonBlockingOperationsSeeComputeWritesAndCompleteInAnyOrder) {
  comm::Communicator& c = nccl();
  const int n = c.size();
  const std::vector<int64_t> counts = uneven_counts(n);
  const int64_t total = offset_of(counts, n);
  // Written on the compute stream just before each start: the start must wait for it.
  kernels::DeviceArray<float> a(ctx(), 1 << 20);
  const std::vector<float> a_host(1 << 20, 1.0f);
  kernels::copy_to_device(ctx(), a.data(), a_host.data(), a_host.size() * sizeof(float));
  comm::Request ra = c.start_all_reduce(a.data(), a.size(), DType::f32);
  kernels::DeviceArray<uint16_t> b = upload(std::vector<uint16_t>(33, f32_to_bf16(2.0f)));
  comm::Request rb = c.start_all_reduce(b.data(), 33, DType::bf16);
  kernels::DeviceArray<float> rs_in = upload(std::vector<float>(total, 1.0f));
  kernels::DeviceArray<float> rs_out(ctx(), counts[c.rank()]);
  comm::Request rs = c.start_reduce_scatter(rs_in.data(), rs_out.data(), counts, DType::f32);
  kernels::DeviceArray<int32_t> ag_in = upload(std::vector<int32_t>(counts[c.rank()], c.rank()));
  kernels::DeviceArray<int32_t> ag_out(ctx(), total);
  comm::Request rg = c.start_all_gather(ag_in.data(), ag_out.data(), counts, DType::i32);
  EXPECT_TRUE(ra.pending());
  c.wait(rg);
  c.wait(rb);
  while (!c.test(rs)) {
  }
  c.wait(ra);
  EXPECT_FALSE(ra.pending());
  expect_error([&] { c.wait(ra); }, {"not pending"});
  const std::vector<float> a_got = download(a);
  EXPECT_EQ(std::count(a_got.begin(), a_got.end(), float(n)), int64_t(a_got.size()));
  EXPECT_EQ(from_bf16(download(b)), std::vector<float>(33, 2.0f * n));
  EXPECT_EQ(download(rs_out), std::vector<float>(counts[c.rank()], float(n)));
  const std::vector<int32_t> g = download(ag_out);
  for (int q = 0; q < n; ++q) {
    for (int64_t j = 0; j < counts[q]; ++j) EXPECT_EQ(g[offset_of(counts, q) + j], q);
  }
}

TEST_F(Nccl, ManyRequestsInFlightGrowTheSlots) {
  comm::Communicator& c = nccl();
  // More than the slots made up front, bf16 among them so that the scratch grows under them.
  std::vector<kernels::DeviceArray<uint16_t>> buffers;
  std::vector<comm::Request> requests;
  for (int k = 0; k < 20; ++k) {
    buffers.push_back(upload(std::vector<uint16_t>(100 * (k + 1), f32_to_bf16(float(k)))));
    requests.push_back(
        c.start_all_reduce(buffers.back().data(), buffers.back().size(), DType::bf16));
  }
  for (int k = 19; k >= 0; --k) c.wait(requests[k]);
  for (int k = 0; k < 20; ++k) {
    EXPECT_EQ(from_bf16(download(buffers[k])),
              std::vector<float>(100 * (k + 1), bf16_to_f32(f32_to_bf16(float(k) * c.size()))))
        << k;
  }
}

TEST(NcclCommunicator, RefusesAHostContext) {
  expect_error([] { comm::make_nccl_communicator(comm::world(), kernels::kCpuContext); },
               {"make_nccl_communicator", "not on a CUDA device"});
}

#else  // !TESSERA_CUDA

TEST(NcclCommunicator, NeedsTheCudaBackend) {
  GTEST_SKIP() << "SKIPPED: this build has no CUDA backend";
}

#endif

}  // namespace
}  // namespace tessera::dist
