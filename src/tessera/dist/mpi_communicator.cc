#include "tessera/dist/mpi_communicator.h"

#include <fmt/format.h>
#include <sched.h>

#include <chrono>
#include <ctime>

#include "tessera/core/error.h"
#include "tessera/dist/launch.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::dist {
namespace {

MPI_Datatype transfer_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::bf16:
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
  kernels::cast_from_low(static_cast<const uint16_t*>(bf16), wide.data(), n,
                         kernels::LowPrecision::kBf16);
  return wide.data();
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_WORLD && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  check(color >= 0, "split: color must be >= 0, got {}", color);
  barrier();
  MPI_Comm sub = MPI_COMM_NULL;
  const int code = MPI_Comm_split(comm_, color, key, &sub);
  check(code == MPI_SUCCESS, "MPI error in split (color {}, key {}) on rank {}: {}", color, key,
        world_rank_, mpi_error_string(code));
  return std::make_unique<MpiCommunicator>(sub);
}

int32_t MpiCommunicator::acquire(Op op, std::string_view type, int64_t count, int peer, int tag) {
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
  slot.op = op;
  slot.type = type;
  slot.count = count;
  slot.peer = peer;
  slot.tag = tag;
  slot.round_to = nullptr;
  return static_cast<int32_t>(index);
}

void MpiCommunicator::release(Slot& slot) {
  slot.request = MPI_REQUEST_NULL;
  slot.busy = false;
}

Request MpiCommunicator::do_start(Op op, const void* send, void* recv, int64_t count,
                                  std::span<const int64_t> counts, DType dtype, int peer, int tag) {
  const int32_t index = acquire(op, dtype_name(dtype), count, peer, tag);
  Slot& slot = *slots_[index];
  const bool sums_bf16 = dtype == DType::bf16 && (op == Op::kAllReduce || op == Op::kReduceScatter);
  const MPI_Datatype type = sums_bf16 ? MPI_FLOAT : transfer_type(dtype);
  slot.mpi_type = type;
  for (size_t r = 0; r < counts.size(); ++r) {
    slot.counts[r] = static_cast<int>(counts[r]);
    slot.displs[r] = r == 0 ? 0 : slot.displs[r - 1] + slot.counts[r - 1];
  }
  const int n = static_cast<int>(count);
  int code = MPI_SUCCESS;
  switch (op) {
    case Op::kAllReduce: {
      void* data = recv;
      if (sums_bf16) {
        data = widen(recv, count, slot.wide_in);
        slot.round_to = static_cast<uint16_t*>(recv);
        slot.round_count = count;
      }
      code = MPI_Iallreduce(MPI_IN_PLACE, data, n, type, MPI_SUM, comm_, &slot.request);
      break;
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
      code = MPI_Ireduce_scatter(in, out, slot.counts.data(), type, MPI_SUM, comm_, &slot.request);
      break;
    }
    case Op::kAllGather: {
      const auto* own_part = static_cast<const char*>(recv) +
                             static_cast<int64_t>(slot.displs[rank_]) * dtype_size(dtype);
      const void* in = send == own_part ? MPI_IN_PLACE : send;
      code = MPI_Iallgatherv(in, slot.counts[rank_], type, recv, slot.counts.data(),
                             slot.displs.data(), type, comm_, &slot.request);
      break;
    }
    case Op::kBroadcast:
      code = MPI_Ibcast(recv, n, type, peer, comm_, &slot.request);
      break;
    case Op::kAllToAll:
      code = MPI_Ialltoall(send, n, type, recv, n, type, comm_, &slot.request);
      break;
    case Op::kSend:
      code = MPI_Isend(send, n, type, peer, tag, comm_, &slot.request);
      break;
    case Op::kRecv:
      code = MPI_Irecv(recv, n, type, peer, tag, comm_, &slot.request);
      break;
    case Op::kBarrier:
      code = MPI_Ibarrier(comm_, &slot.request);
      break;
  }
  if (code != MPI_SUCCESS) fail_mpi(slot, code);
  return Request{this, index, slot.generation};
}

void MpiCommunicator::do_all_reduce_f64(double* data, int64_t count) {
  const int32_t index = acquire(Op::kAllReduce, "f64", count, -1, 0);
  Slot& slot = *slots_[index];
  slot.mpi_type = MPI_DOUBLE;
  const int code = MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_DOUBLE, MPI_SUM,
                                  comm_, &slot.request);
  if (code != MPI_SUCCESS) fail_mpi(slot, code);
  Request request{this, index, slot.generation};
  do_complete(request, true);
}

bool MpiCommunicator::do_complete(Request& request, bool block) {
  const bool live = request.slot >= 0 && static_cast<size_t>(request.slot) < slots_.size() &&
                    slots_[request.slot]->busy &&
                    slots_[request.slot]->generation == request.generation;
  check(live, "wait on a request that was already completed (a copy of it was waited for)");
  Slot& slot = *slots_[request.slot];
  MPI_Status status;
  if (block) {
    poll(slot, status);
  } else {
    int done = 0;
    const int code = MPI_Test(&slot.request, &done, &status);
    if (code != MPI_SUCCESS) fail_mpi(slot, code);
    if (!done) return false;
  }
  if (slot.round_to != nullptr) {
    const float* result =
        slot.op == Op::kReduceScatter ? slot.wide_out.data() : slot.wide_in.data();
    kernels::cast_to_low(result, slot.round_to, slot.round_count, kernels::LowPrecision::kBf16);
  }
  if (slot.op == Op::kRecv) {
    int received = 0;
    MPI_Get_count(&status, slot.mpi_type, &received);
    if (received != slot.count) {
      const std::string what = describe(slot);
      release(slot);
      fail("{} on rank {} received {} elements: sender and receiver disagree on the size", what,
           world_rank_, received);
    }
  }
  release(slot);
  request = Request{};
  return true;
}

void MpiCommunicator::poll(Slot& slot, MPI_Status& status) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double>(timeout_seconds()));
  // Open MPI moves a non-blocking collective forward only inside MPI calls, so the wait keeps
  // testing; sleeping between tests slowed a 64 MiB all-reduce several times over. Yielding
  // still lets other ranks sharing the core run.
  while (true) {
    int done = 0;
    const int code = MPI_Test(&slot.request, &done, &status);
    if (code != MPI_SUCCESS) fail_mpi(slot, code);
    if (done) return;
    const Clock::time_point now = Clock::now();
    if (now > deadline) {
      abort_job(fmt::format(
          "{} did not complete within {:g} s; another rank has probably failed or stopped",
          describe(slot), timeout_seconds()));
    }
    sched_yield();
  }
}

void MpiCommunicator::fail_mpi(Slot& slot, int code) {
  const std::string what = describe(slot);
  release(slot);
  fail("MPI error in {} on rank {}: {}", what, world_rank_, mpi_error_string(code));
}

std::string MpiCommunicator::describe(const Slot& slot) const {
  std::string text = Communicator::describe(slot.op, slot.count, slot.type, slot.peer, slot.tag);
  if (comm_ != MPI_COMM_WORLD) {
    text += fmt::format(" in a group of {} ranks (its rank {})", size_, rank_);
  }
  return text;
}

}  // namespace tessera::dist
