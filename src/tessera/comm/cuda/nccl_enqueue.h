// The NCCL calls behind each collective of NcclCommunicator: how an operation of Communicator,
// even (NCCL's own collective) or uneven (grouped point-to-point calls, reductions or
// broadcasts), is put on the communication stream.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "tessera/comm/communicator.h"

namespace tessera::comm {

// The first failure among a sequence of NCCL calls, so that a group is always ended before the
// failure is reported; ncclInProgress (a non-blocking communicator still enqueuing) is noted but
// is no failure.
struct NcclStatus {
  ncclResult_t result = ncclSuccess;
  const char* call = nullptr;

  void note(ncclResult_t r, const char* c) {
    if (r == ncclSuccess || failed()) return;
    if (r == ncclInProgress && result == ncclInProgress) return;
    result = r;
    call = c;
  }
  bool failed() const { return result != ncclSuccess && result != ncclInProgress; }
};

// Runs `body`, whose NCCL calls are then launched together, between ncclGroupStart and
// ncclGroupEnd.
template <typename Body>
void grouped(NcclStatus& status, Body body) {
  const ncclResult_t started = ncclGroupStart();
  status.note(started, "ncclGroupStart");
  if (started != ncclSuccess) return;
  body();
  status.note(ncclGroupEnd(), "ncclGroupEnd");
}

// Where the calls go and what they carry: elements of `type`, `bytes` each.
struct NcclLink {
  ncclComm_t comm;
  cudaStream_t stream;
  int rank, size;
  ncclDataType_t type;
  size_t bytes;
};

// Enqueues a collective (not a send or receive) with Communicator's arguments; `barrier_word` is
// the one device float a barrier sums.
NcclStatus enqueue_collective(const NcclLink& link, Communicator::Op op, const void* send,
                              void* recv, int64_t count, std::span<const int64_t> counts, int root,
                              float* barrier_word);

}  // namespace tessera::comm
