#include "tessera/comm/cuda/nccl_enqueue.h"

#include <algorithm>

namespace tessera::comm {
namespace {

using Op = Communicator::Op;

bool all_equal(std::span<const int64_t> counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

const void* at(const void* base, int64_t elements, size_t element_bytes) {
  return static_cast<const char*>(base) + elements * int64_t(element_bytes);
}
void* at(void* base, int64_t elements, size_t element_bytes) {
  return static_cast<char*>(base) + elements * int64_t(element_bytes);
}

void reduce_scatter(NcclStatus& status, const NcclLink& l, const void* in, void* out,
                    std::span<const int64_t> counts) {
  const int64_t mine = counts[l.rank];
  if (all_equal(counts)) {
    status.note(ncclReduceScatter(in, out, size_t(mine), l.type, ncclSum, l.comm, l.stream),
                "ncclReduceScatter");
    return;
  }
  // Uneven parts: a reduction onto each rank that receives any, launched as one group.
  // recvbuff is read only on the root, so the other ranks pass none.
  grouped(status, [&] {
    int64_t offset = 0;
    for (int r = 0; r < l.size; ++r) {
      if (counts[r] > 0) {
        status.note(ncclReduce(at(in, offset, l.bytes), r == l.rank ? out : nullptr,
                               size_t(counts[r]), l.type, ncclSum, r, l.comm, l.stream),
                    "ncclReduce");
      }
      offset += counts[r];
    }
  });
}

void all_gather(NcclStatus& status, const NcclLink& l, const void* send, void* recv,
                std::span<const int64_t> counts) {
  if (all_equal(counts)) {
    // NCCL's in-place rule is the contract's: send is recv + rank * count, or apart.
    status.note(ncclAllGather(send, recv, size_t(counts[l.rank]), l.type, l.comm, l.stream),
                "ncclAllGather");
    return;
  }
  // Uneven parts: each rank broadcasts its own into its place; the root's broadcast is in place
  // when send is already there.
  grouped(status, [&] {
    int64_t offset = 0;
    for (int r = 0; r < l.size; ++r) {
      if (counts[r] > 0) {
        void* part = at(recv, offset, l.bytes);
        status.note(ncclBroadcast(r == l.rank ? send : part, part, size_t(counts[r]), l.type, r,
                                  l.comm, l.stream),
                    "ncclBroadcast");
      }
      offset += counts[r];
    }
  });
}

// sent(r) elements to each rank r and received(r) from each, consecutive in rank order. A pair
// with nothing to exchange skips both sides: rank s's sent(r) is rank r's received(s).
struct PerRank {
  std::span<const int64_t> counts;  // empty: `all` for every rank
  int64_t all = 0;
  int64_t operator()(int r) const { return counts.empty() ? all : counts[r]; }
};

void all_to_all(NcclStatus& status, const NcclLink& l, const void* send, void* recv, PerRank sent,
                PerRank received) {
  grouped(status, [&] {
    int64_t sent_at = 0, received_at = 0;
    for (int r = 0; r < l.size; ++r) {
      if (sent(r) > 0) {
        status.note(
            ncclSend(at(send, sent_at, l.bytes), size_t(sent(r)), l.type, r, l.comm, l.stream),
            "ncclSend");
      }
      if (received(r) > 0) {
        status.note(ncclRecv(at(recv, received_at, l.bytes), size_t(received(r)), l.type, r, l.comm,
                             l.stream),
                    "ncclRecv");
      }
      sent_at += sent(r);
      received_at += received(r);
    }
  });
}

}  // namespace

NcclStatus enqueue_collective(const NcclLink& l, Op op, const void* send, void* recv, int64_t count,
                              std::span<const int64_t> counts, int root, float* barrier_word) {
  NcclStatus status;
  if (count == 0 && op != Op::kAllToAllV && op != Op::kBarrier) return status;
  switch (op) {
    case Op::kAllReduce:
      status.note(ncclAllReduce(recv, recv, size_t(count), l.type, ncclSum, l.comm, l.stream),
                  "ncclAllReduce");
      break;
    case Op::kReduceScatter:
      reduce_scatter(status, l, send, recv, counts);
      break;
    case Op::kAllGather:
      all_gather(status, l, send, recv, counts);
      break;
    case Op::kBroadcast:
      status.note(ncclBroadcast(recv, recv, size_t(count), l.type, root, l.comm, l.stream),
                  "ncclBroadcast");
      break;
    case Op::kAllToAll:
      all_to_all(status, l, send, recv, {{}, count}, {{}, count});
      break;
    case Op::kAllToAllV:
      all_to_all(status, l, send, recv, {counts.first(l.size)}, {counts.subspan(l.size, l.size)});
      break;
    case Op::kBarrier:
      status.note(
          ncclAllReduce(barrier_word, barrier_word, 1, ncclFloat32, ncclSum, l.comm, l.stream),
          "ncclAllReduce (barrier)");
      break;
    case Op::kSend:
    case Op::kRecv:
      break;  // grouped apart, by NcclCommunicator::flush_deferred
  }
  return status;
}

}  // namespace tessera::comm
