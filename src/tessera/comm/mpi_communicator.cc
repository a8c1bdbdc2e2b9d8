#include "tessera/comm/mpi_communicator.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>

#include "tessera/comm/world.h"
#include "tessera/core/error.h"
#include "tessera/core/trace.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;

MPI_Datatype transfer_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::bf16:
    case DType::f16:
      return MPI_UINT16_T;
    case DType::i32:
      return MPI_INT32_T;
  }
  return MPI_DATATYPE_NULL;
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return fmt::format("code {}", code);
  return std::string(text, length);
}

// Widens n bf16 values into `wide`, whose capacity only grows.
float* widen(const void* bf16, int64_t n, std::vector<float>& wide) {
  wide.resize(n);
  kernels::cast_from_low(kernels::kCpuContext, static_cast<const uint16_t*>(bf16), wide.data(), n,
                         kernels::LowPrecision::kBf16);
  return wide.data();
}

// The world rank of each rank of `comm`, in its rank order.
std::vector<int> world_ranks(MPI_Comm comm) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  MPI_Comm_group(comm, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  int size = 0;
  MPI_Group_size(group, &size);
  std::vector<int> ranks(size), out(size);
  std::iota(ranks.begin(), ranks.end(), 0);
  MPI_Group_translate_ranks(group, size, ranks.data(), world, out.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return out;
}

}  // namespace

// Ends the job when a blocking operation runs past its deadline. The thread running the
// operation cannot be interrupted inside MPI, and under MPI_THREAD_SERIALIZED no other thread may
// call MPI while it runs (MPI_Abort included), so the watchdog ends the process itself and the
// launcher stops the other ranks.
class MpiCommunicator::Watchdog {
 public:
  // The thread starts with the process's first blocking operation. Neither is ever destroyed: the
  // thread runs until the process ends, past the destruction of statics.
  static Watchdog& instance() {
    static Watchdog* const watchdog = new Watchdog;
    return *watchdog;
  }

  // These bracket every blocking operation, so they allocate nothing and never wake the thread.
  void begin(const MpiCommunicator& comm, const Operation& what) {
    const double timeout = timeout_seconds();
    const Clock::time_point deadline = WaitDeadline::after(timeout);
    std::lock_guard lock(mutex_);
    comm_ = &comm;
    what_ = what;
    timeout_s_ = timeout;
    started_ = Clock::now();
    deadline_ = deadline;
  }
  void end() {
    std::lock_guard lock(mutex_);
    comm_ = nullptr;
  }

 private:
  // The longest the thread sleeps: it notices an operation that began while it slept at its
  // next wake-up, which is before that operation's deadline for any timeout above this.
  static constexpr std::chrono::seconds kMaxSleep{1};

  Watchdog() {
    std::thread([this] { run(); }).detach();
  }

  [[noreturn]] void run() {
    std::unique_lock lock(mutex_);
    Clock::time_point wake = Clock::now();
    while (true) {
      const Clock::time_point now = Clock::now();
      if (comm_ != nullptr && started_ < wake && now - wake > WaitDeadline::kStoppedGap) {
        deadline_ += now - wake;
      }
      // The lock is held from here to the exit, so the operation cannot complete in between.
      if (comm_ != nullptr && now >= deadline_) {
        exit_job(comm_->timeout_message(what_, timeout_s_));
      }
      wake = comm_ != nullptr ? std::min(now + kMaxSleep, deadline_) : now + kMaxSleep;
      lock.unlock();
      std::this_thread::sleep_until(wake);
      lock.lock();
    }
  }

  std::mutex mutex_;
  // The communicator running a blocking operation, or null between operations.
  const MpiCommunicator* comm_ = nullptr;
  Operation what_;
  double timeout_s_ = 0;
  Clock::time_point started_;
  Clock::time_point deadline_;
};

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name)
    : comm_(comm), name_(std::move(name)) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  flight_id_ = FlightRecorder::instance().add_communicator(name_, world_ranks(comm_));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_WORLD && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<Communicator> MpiCommunicator::do_split(int color, int key, std::string_view name) {
  barrier();
  MPI_Comm sub = MPI_COMM_NULL;
  const int code = MPI_Comm_split(comm_, color, key, &sub);
  check(code == MPI_SUCCESS, "MPI error in split (color {}, key {}) on rank {}: {}", color, key,
        world_rank_, mpi_error_string(code));
  return std::make_unique<MpiCommunicator>(sub, std::string(name));
}

int32_t MpiCommunicator::acquire(const Operation& what, size_t element_bytes,
                                 std::span<const int64_t> counts) {
  size_t index = 0;
  while (index < slots_.size() && slots_[index]->busy) ++index;
  if (index == slots_.size()) {
    slots_.push_back(std::make_unique<Slot>());
    slots_.back()->counts.resize(size_);
    slots_.back()->displs.resize(size_);
  }
  Slot& slot = *slots_[index];
  slot.busy = true;
  ++slot.generation;
  slot.what = what;
  slot.round_to = nullptr;
  const trace::Recorder& tracer = trace::Recorder::instance();
  slot.trace_start_us = tracer.on() ? tracer.now_us() : -1;
  slot.what.flight = record_start(what.op, what.type, what.count, counts, what.peer, what.tag,
                                  element_bytes, flight_id_);
  return static_cast<int32_t>(index);
}

void MpiCommunicator::release(Slot& slot) {
  slot.request = MPI_REQUEST_NULL;
  slot.busy = false;
}

Request MpiCommunicator::do_start(Op op, const void* send, void* recv, int64_t count,
                                  std::span<const int64_t> counts, DType dtype, int peer, int tag) {
  const int32_t index =
      acquire({op, enum_name(dtype), count, peer, tag, {}}, dtype_size(dtype), counts);
  Slot& slot = *slots_[index];
  const int code = transfer(slot, send, recv, counts, dtype, &slot.request);
  if (code != MPI_SUCCESS) fail_mpi(slot, code);
  return Request{this, index, slot.generation};
}

void MpiCommunicator::do_run(Op op, const void* send, void* recv, int64_t count,
                             std::span<const int64_t> counts, DType dtype, int peer, int tag) {
  Slot& slot =
      *slots_[acquire({op, enum_name(dtype), count, peer, tag, {}}, dtype_size(dtype), counts)];
  Watchdog& watchdog = Watchdog::instance();
  watchdog.begin(*this, slot.what);
  const int code = transfer(slot, send, recv, counts, dtype, nullptr);
  watchdog.end();
  if (code != MPI_SUCCESS) fail_mpi(slot, code);
  finish(slot);
}

void MpiCommunicator::do_all_reduce_f64(double* data, int64_t count) {
  Slot& slot = *slots_[acquire({Op::kAllReduce, "f64", count, -1, 0, {}}, sizeof(double), {})];
  Watchdog& watchdog = Watchdog::instance();
  watchdog.begin(*this, slot.what);
  const int code =
      MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE, MPI_SUM, comm_);
  watchdog.end();
  if (code != MPI_SUCCESS) fail_mpi(slot, code);
  finish(slot);
}

int MpiCommunicator::transfer(Slot& slot, const void* send, void* recv,
                              std::span<const int64_t> counts, DType dtype, MPI_Request* request) {
  const Op op = slot.what.op;
  const int64_t count = slot.what.count;
  const bool sums_bf16 = dtype == DType::bf16 && (op == Op::kAllReduce || op == Op::kReduceScatter);
  const MPI_Datatype type = sums_bf16 ? MPI_FLOAT : transfer_type(dtype);
  slot.mpi_type = type;
  // An all_to_all_v's counts are the send counts then the receive counts, each with its
  // displacements.
  const int sets = op == Op::kAllToAllV ? 2 : 1;
  if (slot.counts.size() < size_t(sets * size_)) {
    slot.counts.resize(sets * size_);
    slot.displs.resize(sets * size_);
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    slot.counts[i] = static_cast<int>(counts[i]);
    slot.displs[i] = i % size_t(size_) == 0 ? 0 : slot.displs[i - 1] + slot.counts[i - 1];
  }
  const int n = static_cast<int>(count);
  const int peer = slot.what.peer;
  const int tag = slot.what.tag;
  switch (op) {
    case Op::kAllReduce: {
      void* data = recv;
      if (sums_bf16) {
        data = widen(recv, count, slot.wide_in);
        slot.round_to = static_cast<uint16_t*>(recv);
        slot.round_count = count;
      }
      return request ? MPI_Iallreduce(MPI_IN_PLACE, data, n, type, MPI_SUM, comm_, request)
                     : MPI_Allreduce(MPI_IN_PLACE, data, n, type, MPI_SUM, comm_);
    }
    case Op::kReduceScatter: {
      const void* in = send;
      void* out = recv;
      if (sums_bf16) {
        in = widen(send, count, slot.wide_in);
        slot.wide_out.resize(counts[rank_]);
        out = slot.wide_out.data();
        slot.round_to = static_cast<uint16_t*>(recv);
        slot.round_count = counts[rank_];
      }
      int* recv_counts = slot.counts.data();
      return request ? MPI_Ireduce_scatter(in, out, recv_counts, type, MPI_SUM, comm_, request)
                     : MPI_Reduce_scatter(in, out, recv_counts, type, MPI_SUM, comm_);
    }
    case Op::kAllGather: {
      const auto* own_part = static_cast<const char*>(recv) +
                             static_cast<int64_t>(slot.displs[rank_]) * dtype_size(dtype);
      const void* in = send == own_part ? MPI_IN_PLACE : send;
      const int mine = slot.counts[rank_];
      int* all_counts = slot.counts.data();
      int* displs = slot.displs.data();
      return request
                 ? MPI_Iallgatherv(in, mine, type, recv, all_counts, displs, type, comm_, request)
                 : MPI_Allgatherv(in, mine, type, recv, all_counts, displs, type, comm_);
    }
    case Op::kBroadcast:
      return request ? MPI_Ibcast(recv, n, type, peer, comm_, request)
                     : MPI_Bcast(recv, n, type, peer, comm_);
    case Op::kAllToAll:
      return request ? MPI_Ialltoall(send, n, type, recv, n, type, comm_, request)
                     : MPI_Alltoall(send, n, type, recv, n, type, comm_);
    case Op::kAllToAllV: {
      int* sc = slot.counts.data();
      int* sd = slot.displs.data();
      int* rc = sc + size_;
      int* rd = sd + size_;
      return request ? MPI_Ialltoallv(send, sc, sd, type, recv, rc, rd, type, comm_, request)
                     : MPI_Alltoallv(send, sc, sd, type, recv, rc, rd, type, comm_);
    }
    case Op::kSend:
      return request ? MPI_Isend(send, n, type, peer, tag, comm_, request)
                     : MPI_Send(send, n, type, peer, tag, comm_);
    case Op::kRecv:
      return request ? MPI_Irecv(recv, n, type, peer, tag, comm_, request)
                     : MPI_Recv(recv, n, type, peer, tag, comm_, &slot.status);
    case Op::kBarrier:
      return request ? MPI_Ibarrier(comm_, request) : MPI_Barrier(comm_);
  }
  return MPI_ERR_INTERN;
}

bool MpiCommunicator::do_complete(Request& request, bool block) {
  const bool live = request.slot >= 0 && static_cast<size_t>(request.slot) < slots_.size() &&
                    slots_[request.slot]->busy &&
                    slots_[request.slot]->generation == request.generation;
  check(live, "wait on a request that was already completed (a copy of it was waited for)");
  Slot& slot = *slots_[request.slot];
  if (block) {
    poll(slot);
  } else {
    int done = 0;
    const int code = MPI_Test(&slot.request, &done, &slot.status);
    if (code != MPI_SUCCESS) fail_mpi(slot, code);
    if (!done) return false;
  }
  finish(slot);
  request = Request{};
  return true;
}

void MpiCommunicator::poll(Slot& slot) {
  WaitDeadline deadline;
  // Open MPI moves a non-blocking collective forward only inside MPI calls, so the wait keeps
  // testing; sleeping between tests slowed a 64 MiB all-reduce several times over. Yielding
  // still lets other ranks sharing the core run.
  while (true) {
    int done = 0;
    const int code = MPI_Test(&slot.request, &done, &slot.status);
    if (code != MPI_SUCCESS) fail_mpi(slot, code);
    if (done) return;
    if (deadline.passed()) abort_job(timeout_message(slot.what, timeout_seconds()));
    sched_yield();
  }
}

void MpiCommunicator::finish(Slot& slot) {
  FlightRecorder::instance().end(slot.what.flight);
  if (slot.trace_start_us >= 0) {
    // The communicator's name stands as the span's category: it outlives the trace.
    trace::Recorder::instance().add(op_name(slot.what.op).data(), name_.c_str(), slot.what.peer,
                                    slot.trace_start_us);
  }
  if (slot.round_to != nullptr) {
    const float* result =
        slot.what.op == Op::kReduceScatter ? slot.wide_out.data() : slot.wide_in.data();
    kernels::cast_to_low(kernels::kCpuContext, result, slot.round_to, slot.round_count,
                         kernels::LowPrecision::kBf16);
  }
  if (slot.what.op == Op::kRecv) {
    int received = 0;
    MPI_Get_count(&slot.status, slot.mpi_type, &received);
    if (received != slot.what.count) {
      const std::string what = describe(slot.what);
      release(slot);
      fail("{} on rank {} received {} elements: sender and receiver disagree on the size", what,
           world_rank_, received);
    }
  }
  release(slot);
}

void MpiCommunicator::fail_mpi(Slot& slot, int code) {
  const std::string what = describe(slot.what);
  release(slot);
  fail("MPI error in {} on rank {}: {}", what, world_rank_, mpi_error_string(code));
}

std::string MpiCommunicator::describe(const Operation& what) const {
  std::string text = Communicator::describe(what.op, what.count, what.type, what.peer, what.tag);
  if (comm_ != MPI_COMM_WORLD) {
    text += fmt::format(" on {} ({} ranks, its rank {})", name_, size_, rank_);
  }
  return text;
}

std::string MpiCommunicator::timeout_message(const Operation& what, double seconds) const {
  const bool message = what.op == Op::kSend || what.op == Op::kRecv;
  const Stall stall{
      .what = fmt::format("{} on {} ({} ranks)",
                          Communicator::describe(what.op, what.count, what.type, what.peer,
                                                 what.tag, what.flight.seq),
                          name_, size_),
      .communicator = what.flight.communicator,
      .seq = what.flight.seq,
      .peer = message ? what.peer : -1,
      .timeout_s = seconds};
  if (std::optional<std::string> text = FlightRecorder::instance().stall_message(stall)) {
    return *text;
  }
  return fmt::format(
      "{} did not complete within {:g} s; another rank has probably failed or stopped",
      describe(what), seconds);
}

}  // namespace tessera::comm
