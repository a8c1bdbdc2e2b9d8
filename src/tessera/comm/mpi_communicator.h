// The MPI communicator: one process per rank, started by mpirun or srun.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/flight_recorder.h"

namespace tessera::comm {

// Blocking operations call MPI's blocking functions while a watchdog thread, shared by every
// communicator of the process, ends the job when one of them runs past the timeout (see
// set_timeout_seconds). Non-blocking operations run as non-blocking MPI calls, and a wait polls
// its request against the same deadline. MPI failures are returned, not fatal, and surface as
// Errors naming the rank and the operation.
//
// Every operation is recorded in the process's flight recorder, and a timeout's message is built
// from the flight records of all ranks once the recorder has a directory (start_flight_recorder).
//
// Each operation holds a slot while it runs: its MPI request, the f32 scratch of a bf16 reduction
// and the int count arrays MPI wants. Slots are reused and their scratch only grows, so a warm
// communicator allocates nothing per operation (what MPI allocates inside is its own affair).
class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD) and sets its
  // error handler to MPI_ERRORS_RETURN. `name` ("world", "dp", ...) stands for it in messages.
  MpiCommunicator(MPI_Comm comm, std::string name);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  class Watchdog;

  // What an operation is, for error messages.
  struct Operation {
    Op op = Op::kBarrier;
    std::string_view type;
    int64_t count = 0;
    int peer = -1;
    int tag = 0;
    FlightTicket flight;
  };

  struct Slot {
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Status status;
    bool busy = false;
    uint32_t generation = 0;
    Operation what;
    MPI_Datatype mpi_type = MPI_DATATYPE_NULL;
    // A bf16 reduction runs on f32 scratch and is rounded into `round_to` on completion.
    std::vector<float> wide_in;
    std::vector<float> wide_out;
    uint16_t* round_to = nullptr;
    int64_t round_count = 0;
    std::vector<int> counts;
    std::vector<int> displs;
    int64_t trace_start_us = -1;  // when a traced operation started (core/trace.h)
  };

  Request do_start(Op op, const void* send, void* recv, int64_t count,
                   std::span<const int64_t> counts, DType dtype, int peer, int tag) override;
  void do_run(Op op, const void* send, void* recv, int64_t count, std::span<const int64_t> counts,
              DType dtype, int peer, int tag) override;
  bool do_complete(Request& request, bool block) override;
  void do_all_reduce_f64(double* data, int64_t count) override;
  // Waits at a barrier with the usual deadline first, so a missing rank ends the job rather
  // than leaving the others stuck inside MPI_Comm_split.
  std::unique_ptr<Communicator> do_split(int color, int key, std::string_view name) override;

  // Takes a free slot for `what` and records the operation's start.
  int32_t acquire(const Operation& what, size_t element_bytes, std::span<const int64_t> counts);
  // Issues the slot's operation: non-blocking into `request`, or blocking when it is null.
  // Returns MPI's error code.
  int transfer(Slot& slot, const void* send, void* recv, std::span<const int64_t> counts,
               DType dtype, MPI_Request* request);
  // Polls the slot's request until it completes or the deadline passes, which ends the job.
  void poll(Slot& slot);
  // Finishes a completed transfer (rounding bf16 sums, checking a recv's size) and releases it.
  void finish(Slot& slot);
  void release(Slot& slot);
  // Throws an Error for a failed MPI call on `slot`, after releasing it.
  [[noreturn]] void fail_mpi(Slot& slot, int code);
  std::string describe(const Operation& what) const;
  // What a rank says when `what` has run past its `seconds`.
  std::string timeout_message(const Operation& what, double seconds) const;

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 0;
  int world_rank_ = 0;
  std::string name_;
  int32_t flight_id_ = -1;  // in the flight record
  // Owned through pointers so that a reference to a slot survives slots_ growing.
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace tessera::comm
