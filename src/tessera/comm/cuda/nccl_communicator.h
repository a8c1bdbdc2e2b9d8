// The NCCL communicator: the collectives of communicator.h over buffers in the memory of this
// rank's CUDA device, for the ranks of a host communicator (MPI) that it mirrors and that carries
// its set-up. Built with the CUDA backend only (TESSERA_CUDA); never include this header elsewhere.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/comm/flight_recorder.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"

namespace tessera::comm {

// Every buffer passed to it is device memory of the context's device. Operations run, in the order
// they are issued, on a communication stream of the communicator's own: each first waits for
// what the context's compute stream had queued when it was called, so it sees what compute
// wrote, and blocking calls and wait() return once it has finished on the device. The compute
// stream does not wait for the communication stream, so overlap comes from start_* and wait.
//
// What NCCL does differently from MPI:
// - One rank's operations run one after another: a send or receive holds up whatever this rank
//   issues after it until the peer runs the matching one. Sends and receives started one after
//   another are held back and issued together, as one NCCL group, at the next call on this
//   communicator (any operation, wait or test), so a ring of start_recv then send completes; but
//   a rank must not wait on another communicator for a peer that needs this rank's later message.
// - NCCL has no tags: the messages between two ranks are matched in the order they are issued,
//   whatever their tags, which are kept for the flight record and messages only. A recv cannot
//   check that the sender sent `count` elements.
//
// bf16 sums are widened into an f32 scratch on the device, reduced there and rounded once. Slots
// (the events of an operation in flight) and the scratch only grow, so a warm communicator
// allocates nothing on the host or the device per operation.
//
// The NCCL communicator is non-blocking (ncclConfig_t::blocking = 0): no NCCL call waits for a
// peer inside NCCL, so every wait, set-up included, polls against the job's timeout (launch.h).
// One that runs past it writes the flight record, aborts the NCCL communicator (ncclCommAbort)
// and ends the job naming the rank and the operation, as the MPI communicator does. An NCCL
// error is an Error naming the call, the operation and the rank; after one that breaks the
// NCCL communicator it is aborted, and every later call is an Error.
//
// Every operation is recorded in the process's flight recorder as one of this communicator's,
// apart from the host communicator's. The f64 all_reduce (host doubles, for metrics) runs on the
// host communicator and is recorded there.
class NcclCommunicator final : public Communicator {
 public:
  // Collective over `host` (the MPI communicator of the same ranks, or the single-rank one of a
  // job without a launcher), which must outlive this communicator, as must the context (a CUDA
  // one: kernels::DeviceContext; init_world must have run). Rank 0 makes NCCL's unique id, `host`
  // broadcasts it, and every rank joins with its rank in `host`. `name` ("world", "dp", ...)
  // stands for it in messages.
  NcclCommunicator(Communicator& host, const kernels::Context& ctx, std::string name);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  // What an operation is, for error messages and the flight record.
  struct Operation {
    Op op = Op::kBarrier;
    std::string_view type;
    int64_t count = 0;
    int peer = -1;
    int tag = 0;
    FlightTicket flight;
    // A string literal naming a step that is no operation of Communicator (the NCCL set-up);
    // empty for the operations.
    std::string_view step;
  };

  struct Slot {
    // kDeferred: a send or receive started but not yet issued to NCCL (flush_deferred).
    enum class State : uint8_t { kFree, kDeferred, kBusy };
    Slot();
    ~Slot();
    State state = State::kFree;
    uint32_t generation = 0;
    Operation what;
    cudaEvent_t ready = nullptr;  // recorded on the compute stream when the operation starts
    cudaEvent_t done = nullptr;   // recorded on the communication stream after it
    // A deferred send's or receive's buffer and type, until it is issued.
    const void* send = nullptr;
    void* recv = nullptr;
    DType dtype = DType::f32;
    int64_t trace_start_us = -1;  // when a traced operation started (core/trace.h)
  };

  // A split: owns the host communicator it mirrors.
  NcclCommunicator(std::unique_ptr<Communicator> owned_host, Communicator& host,
                   const kernels::Context& ctx, std::string name);

  Request do_start(Op op, const void* send, void* recv, int64_t count,
                   std::span<const int64_t> counts, DType dtype, int peer, int tag) override;
  void do_run(Op op, const void* send, void* recv, int64_t count, std::span<const int64_t> counts,
              DType dtype, int peer, int tag) override;
  bool do_complete(Request& request, bool block) override;
  void do_all_reduce_f64(double* data, int64_t count) override;
  // Splits the host communicator and makes a new NCCL communicator over the result (rather than
  // ncclCommSplit), so that every NCCL communicator has a host communicator of the same ranks.
  std::unique_ptr<Communicator> do_split(int color, int key, std::string_view name) override;

  // The NCCL communicator's set-up, collective over the host communicator.
  void join();
  // Throws when an earlier error aborted the NCCL communicator; makes its device current.
  void enter();
  // Takes a free slot for `what` (making one when all are busy) and records its start.
  int32_t acquire(const Operation& what, size_t element_bytes, std::span<const int64_t> counts);
  // Starts the slot's operation: a send or receive is deferred, anything else is issued after
  // the deferred ones.
  void issue(int32_t index, const void* send, void* recv, std::span<const int64_t> counts,
             DType dtype);
  // Issues the deferred sends and receives as one group.
  void flush_deferred();
  // Makes the f32 scratch hold `n` floats for the slot's operation.
  void reserve_scratch(Slot& slot, int64_t n);
  // Waits, against the job's timeout, until NCCL has finished enqueuing what the last call
  // handed it (a non-blocking communicator's ncclInProgress); `call` names that call.
  void settle(const Operation& what, Slot* slot, const char* call);
  // Whether the slot's operation has finished on the device.
  bool finished(Slot& slot);
  // Throws for an error NCCL reported since the slot's operation was issued.
  void check_async(const Operation& what, Slot* slot);
  // Polls `done` until it returns true, or the job's timeout passes, which ends the job.
  template <typename Done>
  void await(const Operation& what, Done done);
  // Records a completed operation's end and releases its slot.
  void finish(Slot& slot);
  void release(Slot& slot);
  // Throws an Error for a failed NCCL call of `what`, after releasing `slot` (when given) and
  // aborting the NCCL communicator when the error is `fatal` or leaves it unusable.
  [[noreturn]] void fail_nccl_call(const Operation& what, Slot* slot, const char* call,
                                   ncclResult_t result, bool fatal);
  // The same for a failed CUDA runtime call.
  [[noreturn]] void fail_cuda_call(Slot* slot, const char* call, cudaError_t status);
  void check_cuda_call(cudaError_t status, const char* call, Slot* slot) {
    if (status != cudaSuccess) fail_cuda_call(slot, call, status);
  }
  // Aborts the NCCL communicator (ncclCommAbort) and remembers why.
  void abort_nccl(std::string why);
  // Writes the flight record, aborts the NCCL communicator and ends the job.
  [[noreturn]] void time_out(const Operation& what);
  std::string describe(const Operation& what) const;
  std::string timeout_message(const Operation& what, double seconds) const;

  std::unique_ptr<Communicator> owned_host_;  // a split's; null for one built over a given host
  Communicator& host_;
  kernels::Context ctx_;       // this rank's device; ctx_.stream is the compute stream
  kernels::Context comm_ctx_;  // the same device with the communication stream, for the casts
  std::string name_;
  int rank_ = 0;
  int size_ = 0;
  int world_rank_ = 0;
  int32_t flight_id_ = -1;  // in the flight record
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;  // null once aborted
  std::string aborted_because_;
  // Owned through pointers so that a reference to a slot survives slots_ growing.
  std::vector<std::unique_ptr<Slot>> slots_;
  // Indices of the slots of sends and receives not yet issued, in start order; its capacity
  // follows slots_, so deferring allocates nothing.
  std::vector<int32_t> deferred_;
  // The f32 scratch of bf16 sums. Operations run in order on the one stream, so one scratch
  // serves them all; it grows only when a larger call arrives.
  kernels::DeviceArray<float> wide_;
  kernels::DeviceArray<float> barrier_word_;  // the one float a barrier sums
};

// An NcclCommunicator over the ranks of `mpi` on ctx's device; throws naming the reason when ctx
// is not a CUDA context. Collective over `mpi`; `mpi` and the context must outlive the result.
std::unique_ptr<Communicator> make_nccl_communicator(Communicator& mpi, const kernels::Context& ctx,
                                                     std::string_view name = "nccl");

}  // namespace tessera::comm
