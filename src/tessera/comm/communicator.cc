#include "tessera/comm/communicator.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "tessera/core/error.h"

namespace tessera::comm {
namespace {

// MPI counts and displacements are C ints.
constexpr int64_t kMaxCount = std::numeric_limits<int32_t>::max();
// The largest tag every MPI implementation must accept.
constexpr int kMaxTag = 32767;

void check_count(const char* op, int64_t count) {
  check(count >= 0, "{}: the element count must be >= 0, got {}", op, count);
  check(count <= kMaxCount,
        "{} of {} elements: one call moves at most 2^31-1 elements; split the buffer", op, count);
}

void check_buffer(const char* op, const void* data, int64_t count) {
  check_count(op, count);
  check(data != nullptr || count == 0, "{}: null buffer for {} elements", op, count);
}

// Validates per-rank counts and returns their sum.
int64_t checked_total(const char* op, std::span<const int64_t> counts, int size) {
  check(counts.size() == static_cast<size_t>(size),
        "{}: {} per-rank counts given for a communicator of {} ranks", op, counts.size(), size);
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    check(counts[r] >= 0, "{}: the count for rank {} must be >= 0, got {}", op, r, counts[r]);
    total += counts[r];
    check_count(op, total);
  }
  return total;
}

void check_rank(const char* op, const char* role, int rank, int size) {
  check(rank >= 0 && rank < size, "{}: {} rank {} is outside this communicator's 0..{}", op, role,
        rank, size - 1);
}

void check_tag(const char* op, int tag) {
  check(tag >= 0 && tag <= kMaxTag, "{}: tag {} is outside 0..{}", op, tag, kMaxTag);
}

bool overlap(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

int64_t bytes(int64_t count, DType dtype) {
  return count * static_cast<int64_t>(dtype_size(dtype));
}

// Validates a reduce_scatter and returns the number of elements in `send`.
int64_t checked_reduce_scatter(const void* send, const void* recv,
                               std::span<const int64_t> recv_counts, DType dtype, int rank,
                               int size) {
  const int64_t total = checked_total("reduce_scatter", recv_counts, size);
  const int64_t mine = recv_counts[rank];
  check_buffer("reduce_scatter", send, total);
  check_buffer("reduce_scatter", recv, mine);
  check(!overlap(send, bytes(total, dtype), recv, bytes(mine, dtype)),
        "reduce_scatter: the receive buffer overlaps the send buffer");
  return total;
}

// Validates an all_gather and returns the number of elements in `recv`.
int64_t checked_all_gather(const void* send, const void* recv, std::span<const int64_t> counts,
                           DType dtype, int rank, int size) {
  const int64_t total = checked_total("all_gather", counts, size);
  int64_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += counts[r];
  const int64_t mine = counts[rank];
  check_buffer("all_gather", send, mine);
  check_buffer("all_gather", recv, total);
  const auto* own_part = static_cast<const char*>(recv) + bytes(offset, dtype);
  check(send == own_part || !overlap(send, bytes(mine, dtype), recv, bytes(total, dtype)),
        "all_gather: the send buffer overlaps the receive buffer but is not this rank's part of "
        "it (rank {} starts at element {})",
        rank, offset);
  return total;
}

void check_message(const char* op, const void* data, int64_t count, const char* role, int peer,
                   int tag, int size) {
  check_buffer(op, data, count);
  check_rank(op, role, peer, size);
  check_tag(op, tag);
}

}  // namespace

namespace {

// bf16 sums are widened to f32 on the way; f16 ones are not offered.
void check_summable(const char* op, DType dtype) {
  check(dtype != DType::f16, "{}: f16 elements cannot be summed; reduce them in f32", op);
}

}  // namespace

void Communicator::all_reduce(void* data, int64_t count, DType dtype) {
  check_summable("all_reduce", dtype);
  check_buffer("all_reduce", data, count);
  do_run(Op::kAllReduce, nullptr, data, count, {}, dtype, -1, 0);
}

void Communicator::all_reduce(double* data, int64_t count) {
  check_buffer("all_reduce", data, count);
  do_all_reduce_f64(data, count);
}

void Communicator::reduce_scatter(const void* send, void* recv,
                                  std::span<const int64_t> recv_counts, DType dtype) {
  check_summable("reduce_scatter", dtype);
  const int64_t total = checked_reduce_scatter(send, recv, recv_counts, dtype, rank(), size());
  do_run(Op::kReduceScatter, send, recv, total, recv_counts, dtype, -1, 0);
}

void Communicator::all_gather(const void* send, void* recv, std::span<const int64_t> counts,
                              DType dtype) {
  const int64_t total = checked_all_gather(send, recv, counts, dtype, rank(), size());
  do_run(Op::kAllGather, send, recv, total, counts, dtype, -1, 0);
}

void Communicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  check_buffer("broadcast", data, count);
  check_rank("broadcast", "root", root, size());
  do_run(Op::kBroadcast, nullptr, data, count, {}, dtype, root, 0);
}

void Communicator::all_to_all(const void* send, void* recv, int64_t count_per_rank, DType dtype) {
  check_count("all_to_all", count_per_rank);
  check_buffer("all_to_all", send, count_per_rank * size());
  check_buffer("all_to_all", recv, count_per_rank * size());
  const int64_t n = bytes(count_per_rank * size(), dtype);
  check(!overlap(send, n, recv, n), "all_to_all: the send and receive buffers overlap");
  do_run(Op::kAllToAll, send, recv, count_per_rank, {}, dtype, /*peer=*/-1, /*tag=*/0);
}

void Communicator::all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                                std::span<const int64_t> recv_counts, DType dtype) {
  check(int(send_counts.size()) == size() && int(recv_counts.size()) == size(),
        "all_to_all_v: {} send and {} receive counts for {} ranks", send_counts.size(),
        recv_counts.size(), size());
  int64_t sent = 0, received = 0;
  for (int r = 0; r < size(); ++r) {
    check_count("all_to_all_v", send_counts[r]);
    check_count("all_to_all_v", recv_counts[r]);
    sent += send_counts[r];
    received += recv_counts[r];
  }
  check_count("all_to_all_v", sent);
  check_count("all_to_all_v", received);
  check_buffer("all_to_all_v", send, sent);
  check_buffer("all_to_all_v", recv, received);
  check(!overlap(send, bytes(sent, dtype), recv, bytes(received, dtype)),
        "all_to_all_v: the send and receive buffers overlap");
  std::vector<int64_t>& counts = all_to_all_counts_;
  counts.assign(send_counts.begin(), send_counts.end());
  counts.insert(counts.end(), recv_counts.begin(), recv_counts.end());
  do_run(Op::kAllToAllV, send, recv, sent, counts, dtype, /*peer=*/-1, /*tag=*/0);
}

void Communicator::send(const void* data, int64_t count, DType dtype, int dest, int tag) {
  check_message("send", data, count, "destination", dest, tag, size());
  do_run(Op::kSend, data, nullptr, count, {}, dtype, dest, tag);
}

void Communicator::recv(void* data, int64_t count, DType dtype, int source, int tag) {
  check_message("recv", data, count, "source", source, tag, size());
  do_run(Op::kRecv, nullptr, data, count, {}, dtype, source, tag);
}

void Communicator::barrier() { do_run(Op::kBarrier, nullptr, nullptr, 0, {}, DType::f32, -1, 0); }

Request Communicator::start_all_reduce(void* data, int64_t count, DType dtype) {
  check_summable("start_all_reduce", dtype);
  check_buffer("all_reduce", data, count);
  return do_start(Op::kAllReduce, nullptr, data, count, {}, dtype, -1, 0);
}

Request Communicator::start_reduce_scatter(const void* send, void* recv,
                                           std::span<const int64_t> recv_counts, DType dtype) {
  check_summable("start_reduce_scatter", dtype);
  const int64_t total = checked_reduce_scatter(send, recv, recv_counts, dtype, rank(), size());
  return do_start(Op::kReduceScatter, send, recv, total, recv_counts, dtype, -1, 0);
}

Request Communicator::start_all_gather(const void* send, void* recv,
                                       std::span<const int64_t> counts, DType dtype) {
  const int64_t total = checked_all_gather(send, recv, counts, dtype, rank(), size());
  return do_start(Op::kAllGather, send, recv, total, counts, dtype, -1, 0);
}

Request Communicator::start_send(const void* data, int64_t count, DType dtype, int dest, int tag) {
  check_message("send", data, count, "destination", dest, tag, size());
  return do_start(Op::kSend, data, nullptr, count, {}, dtype, dest, tag);
}

Request Communicator::start_recv(void* data, int64_t count, DType dtype, int source, int tag) {
  check_message("recv", data, count, "source", source, tag, size());
  return do_start(Op::kRecv, nullptr, data, count, {}, dtype, source, tag);
}

void Communicator::wait(Request& request) {
  check(request.pending(), "wait on a request that is not pending (completed or never started)");
  check(request.owner == this, "wait on a request started by another communicator");
  do_complete(request, true);
}

bool Communicator::test(Request& request) {
  check(request.pending(), "test on a request that is not pending (completed or never started)");
  check(request.owner == this, "test on a request started by another communicator");
  return do_complete(request, false);
}

std::unique_ptr<Communicator> Communicator::split(int color, int key, std::string_view name) {
  check(color >= 0, "split: color must be >= 0, got {}", color);
  return do_split(color, key, name);
}

FlightTicket Communicator::record_start(Op op, std::string_view type, int64_t count,
                                        std::span<const int64_t> counts, int peer, int tag,
                                        size_t element_bytes, int32_t flight_id) const {
  int64_t elements = count;
  if (op == Op::kAllGather) elements = counts[rank()];
  if (op == Op::kAllToAll) elements = count * size();
  return FlightRecorder::instance().begin({.op = op_name(op),
                                           .dtype = type,
                                           .communicator = flight_id,
                                           .peer = peer,
                                           .tag = tag,
                                           .count = count,
                                           .bytes = elements * int64_t(element_bytes)},
                                          op != Op::kSend && op != Op::kRecv);
}

std::string_view Communicator::op_name(Op op) {
  switch (op) {
    case Op::kAllReduce:
      return "all_reduce";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kAllGather:
      return "all_gather";
    case Op::kBroadcast:
      return "broadcast";
    case Op::kAllToAll:
      return "all_to_all";
    case Op::kAllToAllV:
      return "all_to_all_v";
    case Op::kSend:
      return "send";
    case Op::kRecv:
      return "recv";
    case Op::kBarrier:
      return "barrier";
  }
  return "operation";
}

std::string Communicator::describe(Op op, int64_t count, std::string_view type, int peer, int tag,
                                   int64_t seq) {
  const std::string name =
      seq > 0 ? fmt::format("{} #{}", op_name(op), seq) : std::string(op_name(op));
  switch (op) {
    case Op::kAllReduce:
    case Op::kReduceScatter:
    case Op::kAllGather:
      return fmt::format("{} of {} {} elements", name, count, type);
    case Op::kBroadcast:
      return fmt::format("{} of {} {} elements from rank {}", name, count, type, peer);
    case Op::kAllToAll:
      return fmt::format("{} of {} {} elements per rank", name, count, type);
    case Op::kAllToAllV:
      return fmt::format("{} sending {} {} elements", name, count, type);
    case Op::kSend:
      return fmt::format("{} of {} {} elements to rank {} (tag {})", name, count, type, peer, tag);
    case Op::kRecv:
      return fmt::format("{} of {} {} elements from rank {} (tag {})", name, count, type, peer,
                         tag);
    case Op::kBarrier:
      break;
  }
  return name;
}

}  // namespace tessera::comm
