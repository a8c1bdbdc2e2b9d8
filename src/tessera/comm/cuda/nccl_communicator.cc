#include "tessera/comm/cuda/nccl_communicator.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>

#include "tessera/comm/cuda/nccl_enqueue.h"
#include "tessera/comm/world.h"
#include "tessera/core/error.h"
#include "tessera/core/trace.h"
#include "tessera/kernels/cuda/check.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::comm {
namespace {

// Slots made with the communicator, so that the first steps of training make no events; more are
// made when more operations are in flight at once.
constexpr size_t kInitialSlots = 8;

// NCCL's unique id travels as i32 words: DType has no bytes.
constexpr size_t kIdWords = (sizeof(ncclUniqueId) + sizeof(int32_t) - 1) / sizeof(int32_t);

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
  }
  fail("the NCCL communicator cannot move {} elements (dtype code {}): NCCL has no such type",
       enum_name(dtype), int(dtype));
}

// "ncclAllReduce failed: unhandled system error (<NCCL's last message>)", on one line: the one
// way every failed NCCL call is told.
std::string nccl_failure(const char* call, ncclResult_t result, ncclComm_t comm) {
  std::string text = fmt::format("{} failed: {}", call, ncclGetErrorString(result));
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') {
    std::string detail(last);
    std::replace(detail.begin(), detail.end(), '\n', ' ');
    text += fmt::format(" ({})", detail);
  }
  return text;
}

// Errors after which the call has had no effect and the communicator is still usable; after any
// other, NCCL asks for the communicator to be aborted.
bool leaves_communicator_usable(ncclResult_t result) {
  return result == ncclInvalidArgument || result == ncclInvalidUsage;
}

// Polls `done` until it returns true (then true) or the job's timeout passes (then false). It
// spins, yielding, rather than sleeping, since a small collective completes in microseconds.
template <typename Done>
bool poll_until_timeout(Done done) {
  WaitDeadline deadline;
  while (!done()) {
    if (deadline.passed()) return false;
    sched_yield();
  }
  return true;
}

}  // namespace

NcclCommunicator::Slot::Slot() {
  cudaError_t status = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (status == cudaSuccess) status = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (status != cudaSuccess) {
    if (ready != nullptr) cudaEventDestroy(ready);
    kernels::cuda::fail_cuda("cudaEventCreateWithFlags (an NCCL request slot)", status);
  }
}

NcclCommunicator::Slot::~Slot() {
  cudaEventDestroy(ready);
  cudaEventDestroy(done);
}

template <typename Done>
void NcclCommunicator::await(const Operation& what, Done done) {
  if (!poll_until_timeout(done)) time_out(what);
}

NcclCommunicator::NcclCommunicator(Communicator& host, const kernels::Context& ctx,
                                   std::string name)
    : NcclCommunicator(nullptr, host, ctx, std::move(name)) {}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> owned_host, Communicator& host,
                                   const kernels::Context& ctx, std::string name)
    : owned_host_(std::move(owned_host)),
      host_(host),
      ctx_(ctx),
      comm_ctx_(ctx),
      name_(std::move(name)),
      rank_(host.rank()),
      size_(host.size()) {
  check(ctx.on_cuda(),
        "the NCCL communicator {} needs a CUDA context, got a {} one: NCCL moves device memory, "
        "and host buffers go through the MPI communicator",
        name_, enum_name(ctx.device.kind));
  world_rank_ = world().rank();
  try {
    join();
  } catch (...) {
    // The members release their own device memory; the handles are this object's to release.
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    throw;
  }
}

void NcclCommunicator::join() {
  kernels::cuda::check_cuda(cudaSetDevice(ctx_.device.ordinal), "cudaSetDevice");
  // The members' world ranks, for the flight record; the host communicator knows no others.
  std::vector<int32_t> members(size_);
  const std::vector<int64_t> ones(size_, 1);
  const int32_t me = world_rank_;
  host_.all_gather(&me, members.data(), ones, DType::i32);
  flight_id_ = FlightRecorder::instance().add_communicator(
      name_, std::vector<int>(members.begin(), members.end()));

  // Rank 0's id, and whether it could make one: the other ranks must fail with it, not wait.
  std::array<int32_t, kIdWords + 1> words{};
  if (rank_ == 0) {
    ncclUniqueId id{};
    words[kIdWords] = ncclGetUniqueId(&id);
    std::memcpy(words.data(), &id, sizeof(id));
  }
  host_.broadcast(words.data(), int64_t(words.size()), DType::i32, 0);
  const auto made = static_cast<ncclResult_t>(words[kIdWords]);
  check(made == ncclSuccess,
        "NCCL: ncclGetUniqueId failed on rank 0 of {}, so no rank can join its NCCL "
        "communicator: {}",
        name_, ncclGetErrorString(made));
  ncclUniqueId id;
  std::memcpy(&id, words.data(), sizeof(id));

  kernels::cuda::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                            "cudaStreamCreateWithFlags (the NCCL communication stream)");
  comm_ctx_.stream = stream_;

  // Recorded as a collective, so that a rank that never joins is named in the stall report.
  Operation setup;
  setup.step = "NCCL set-up (ncclCommInitRankConfig)";
  setup.flight = FlightRecorder::instance().begin(
      {.op = "nccl_init", .dtype = "", .communicator = flight_id_, .peer = -1, .tag = 0},
      /*collective=*/true);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  // Non-blocking: joining and every later call return at once and are polled against the job's
  // timeout, rather than waiting inside NCCL, with no deadline, for a peer that may never come.
  config.blocking = 0;
  config.commName = name_.c_str();
  const ncclResult_t joined = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  if (joined != ncclSuccess && joined != ncclInProgress) {
    fail_nccl_call(setup, nullptr, "ncclCommInitRankConfig", joined, true);
  }
  settle(setup, nullptr, "ncclCommInitRankConfig");
  FlightRecorder::instance().end(setup.flight);

  for (size_t i = 0; i < kInitialSlots; ++i) slots_.push_back(std::make_unique<Slot>());
  deferred_.reserve(slots_.size());
  barrier_word_ = kernels::DeviceArray<float>(comm_ctx_, 1);
}

NcclCommunicator::~NcclCommunicator() {
  cudaSetDevice(ctx_.device.ordinal);
  if (comm_ != nullptr) {
    // ncclCommDestroy finalizes a communicator itself, waiting for its operations without a
    // deadline; finalizing first, under the job's timeout, turns a peer that never comes into an
    // abort rather than a hang at exit.
    bool clean = false;
    const ncclResult_t finalizing = ncclCommFinalize(comm_);
    if (finalizing == ncclSuccess || finalizing == ncclInProgress) {
      ncclResult_t state = ncclInProgress;
      const bool settled = poll_until_timeout([&] {
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
        return state != ncclInProgress;
      });
      clean = settled && state == ncclSuccess;
    }
    if (clean) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  // Work still queued on the stream (a cast) completes; the scratch is freed after this body.
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& mpi, const kernels::Context& ctx,
                                                     std::string_view name) {
  if (!ctx.on_cuda()) {
    const std::string why = kernels::cuda_unavailable_reason();
    fail(
        "make_nccl_communicator: the context is on the {}, not on a CUDA device{}: NCCL moves "
        "device memory, and host buffers go through the MPI communicator",
        enum_name(ctx.device.kind), why.empty() ? "" : " (" + why + ")");
  }
  return std::make_unique<NcclCommunicator>(mpi, ctx, std::string(name));
}

std::unique_ptr<Communicator> NcclCommunicator::do_split(int color, int key,
                                                         std::string_view name) {
  enter();
  // The host split waits at a barrier under the usual deadline first (mpi_communicator.h).
  std::unique_ptr<Communicator> sub = host_.split(color, key, name);
  Communicator& sub_ref = *sub;
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(std::move(sub), sub_ref, ctx_, std::string(name)));
}

void NcclCommunicator::do_all_reduce_f64(double* data, int64_t count) {
  host_.all_reduce(data, count);
}

void NcclCommunicator::enter() {
  check(comm_ != nullptr,
        "the NCCL communicator {} on rank {} was aborted after an error ({}); make a new one",
        name_, world_rank_, aborted_because_);
  kernels::cuda::check_cuda(cudaSetDevice(ctx_.device.ordinal), "cudaSetDevice");
}

int32_t NcclCommunicator::acquire(const Operation& what, size_t element_bytes,
                                  std::span<const int64_t> counts) {
  size_t index = 0;
  while (index < slots_.size() && slots_[index]->state != Slot::State::kFree) ++index;
  if (index == slots_.size()) {
    slots_.push_back(std::make_unique<Slot>());
    deferred_.reserve(slots_.size());
  }
  Slot& slot = *slots_[index];
  slot.state = Slot::State::kBusy;
  ++slot.generation;
  slot.what = what;
  const trace::Recorder& tracer = trace::Recorder::instance();
  slot.trace_start_us = tracer.on() ? tracer.now_us() : -1;
  slot.what.flight = record_start(what.op, what.type, what.count, counts, what.peer, what.tag,
                                  element_bytes, flight_id_);
  return static_cast<int32_t>(index);
}

void NcclCommunicator::release(Slot& slot) { slot.state = Slot::State::kFree; }

Request NcclCommunicator::do_start(Op op, const void* send, void* recv, int64_t count,
                                   std::span<const int64_t> counts, DType dtype, int peer,
                                   int tag) {
  enter();
  const int32_t index =
      acquire({op, enum_name(dtype), count, peer, tag, {}, {}}, dtype_size(dtype), counts);
  issue(index, send, recv, counts, dtype);
  return Request{this, index, slots_[index]->generation};
}

void NcclCommunicator::do_run(Op op, const void* send, void* recv, int64_t count,
                              std::span<const int64_t> counts, DType dtype, int peer, int tag) {
  enter();
  const int32_t index =
      acquire({op, enum_name(dtype), count, peer, tag, {}, {}}, dtype_size(dtype), counts);
  issue(index, send, recv, counts, dtype);
  Slot& slot = *slots_[index];
  if (slot.state == Slot::State::kDeferred) flush_deferred();
  await(slot.what, [&] { return finished(slot); });
  finish(slot);
}

bool NcclCommunicator::do_complete(Request& request, bool block) {
  const bool live = request.slot >= 0 && static_cast<size_t>(request.slot) < slots_.size() &&
                    slots_[request.slot]->state != Slot::State::kFree &&
                    slots_[request.slot]->generation == request.generation;
  check(live, "wait on a request that was already completed (a copy of it was waited for)");
  enter();
  Slot& slot = *slots_[request.slot];
  if (slot.state == Slot::State::kDeferred) flush_deferred();
  if (block) {
    await(slot.what, [&] { return finished(slot); });
  } else if (!finished(slot)) {
    return false;
  }
  finish(slot);
  request = Request{};
  return true;
}

void NcclCommunicator::issue(int32_t index, const void* send, void* recv,
                             std::span<const int64_t> counts, DType dtype) {
  Slot& slot = *slots_[index];
  const Op op = slot.what.op;
  const auto compute = static_cast<cudaStream_t>(ctx_.stream);
  if (op == Op::kSend || op == Op::kRecv) {
    // Fenced now, so that the message carries what compute had written when it was started.
    check_cuda_call(cudaEventRecord(slot.ready, compute), "cudaEventRecord", &slot);
    slot.send = send;
    slot.recv = recv;
    slot.dtype = dtype;
    slot.state = Slot::State::kDeferred;
    deferred_.push_back(index);  // within its capacity: one per slot
    return;
  }
  try {
    // Issued first, so that every rank's stream holds its operations in the order it started
    // them.
    flush_deferred();
    const int64_t count = slot.what.count;
    const bool sums_bf16 =
        dtype == DType::bf16 && (op == Op::kAllReduce || op == Op::kReduceScatter);
    // A bf16 sum runs in f32 on the scratch: an all-reduce in place, a reduce-scatter from the
    // scratch's first count floats into the floats after them; the result is rounded back once
    // NCCL is done with it.
    uint16_t* round_to = nullptr;
    int64_t round_count = 0;
    if (sums_bf16) {
      const bool all_reduce = op == Op::kAllReduce;
      reserve_scratch(slot, all_reduce ? count : count + counts[rank_]);
      kernels::cast_from_low(comm_ctx_, static_cast<const uint16_t*>(all_reduce ? recv : send),
                             wide_.data(), count, kernels::LowPrecision::kBf16);
      round_to = static_cast<uint16_t*>(recv);
      round_count = all_reduce ? count : counts[rank_];
      send = wide_.data();
      recv = wide_.data() + (all_reduce ? 0 : count);
    }
    check_cuda_call(cudaEventRecord(slot.ready, compute), "cudaEventRecord", &slot);
    check_cuda_call(cudaStreamWaitEvent(stream_, slot.ready, 0), "cudaStreamWaitEvent", &slot);
    const NcclLink link{comm_,
                        stream_,
                        rank_,
                        size_,
                        sums_bf16 ? ncclFloat32 : nccl_type(dtype),
                        sums_bf16 ? sizeof(float) : dtype_size(dtype)};
    const NcclStatus status = enqueue_collective(link, op, send, recv, count, counts,
                                                 slot.what.peer, barrier_word_.data());
    if (status.failed()) fail_nccl_call(slot.what, &slot, status.call, status.result, false);
    // A non-blocking communicator may still be enqueuing; nothing else may go on the stream
    // before it has.
    if (status.result == ncclInProgress) settle(slot.what, &slot, status.call);
    if (round_count > 0) {
      kernels::cast_to_low(comm_ctx_, static_cast<const float*>(recv), round_to, round_count,
                           kernels::LowPrecision::kBf16);
    }
    check_cuda_call(cudaEventRecord(slot.done, stream_), "cudaEventRecord", &slot);
  } catch (...) {
    release(slot);
    throw;
  }
}

void NcclCommunicator::flush_deferred() {
  if (deferred_.empty()) return;
  // Released together when the group fails: none of it can be told apart.
  auto release_all = [&] {
    for (int32_t index : deferred_) release(*slots_[index]);
    deferred_.clear();
  };
  const Operation first = slots_[deferred_.front()]->what;
  for (int32_t index : deferred_) {
    const cudaError_t fenced = cudaStreamWaitEvent(stream_, slots_[index]->ready, 0);
    if (fenced != cudaSuccess) {
      release_all();
      fail_cuda_call(nullptr, "cudaStreamWaitEvent", fenced);
    }
  }
  NcclStatus status;
  grouped(status, [&] {
    for (int32_t index : deferred_) {
      const Slot& s = *slots_[index];
      if (s.what.count == 0) continue;  // both sides know the count, so both skip
      const ncclDataType_t type = nccl_type(s.dtype);
      if (s.what.op == Op::kSend) {
        status.note(ncclSend(s.send, size_t(s.what.count), type, s.what.peer, comm_, stream_),
                    "ncclSend");
      } else {
        status.note(ncclRecv(s.recv, size_t(s.what.count), type, s.what.peer, comm_, stream_),
                    "ncclRecv");
      }
    }
  });
  if (status.failed()) {
    release_all();
    fail_nccl_call(first, nullptr, status.call, status.result, false);
  }
  if (status.result == ncclInProgress) {
    try {
      settle(first, nullptr, status.call);
    } catch (...) {
      release_all();
      throw;
    }
  }
  for (int32_t index : deferred_) {
    Slot& s = *slots_[index];
    const cudaError_t recorded = cudaEventRecord(s.done, stream_);
    if (recorded != cudaSuccess) {
      release_all();
      fail_cuda_call(nullptr, "cudaEventRecord", recorded);
    }
    s.state = Slot::State::kBusy;
  }
  deferred_.clear();
}

void NcclCommunicator::reserve_scratch(Slot& slot, int64_t n) {
  if (n <= wide_.size()) return;
  // The operations before this one may still use the scratch, and freeing it (cudaFree) would
  // wait for them with no deadline: wait here first, against the job's timeout. Only a call larger
  // than any before waits, so a warm step never does.
  await(slot.what, [&] {
    const cudaError_t idle = cudaStreamQuery(stream_);
    if (idle == cudaSuccess) return true;
    if (idle != cudaErrorNotReady) fail_cuda_call(&slot, "cudaStreamQuery", idle);
    cudaGetLastError();  // "not ready" is no error, but would be reported as one by the next check
    check_async(slot.what, &slot);
    return false;
  });
  wide_ = kernels::DeviceArray<float>();  // freed first, so that the peak holds only the new one
  wide_ = kernels::DeviceArray<float>(comm_ctx_, n);
}

void NcclCommunicator::settle(const Operation& what, Slot* slot, const char* call) {
  await(what, [&] {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
    if (asked != ncclSuccess) fail_nccl_call(what, slot, "ncclCommGetAsyncError", asked, true);
    if (state == ncclInProgress) return false;
    if (state != ncclSuccess) fail_nccl_call(what, slot, call, state, true);
    return true;
  });
}

bool NcclCommunicator::finished(Slot& slot) {
  const cudaError_t status = cudaEventQuery(slot.done);
  if (status == cudaSuccess) return true;
  if (status != cudaErrorNotReady) fail_cuda_call(&slot, "cudaEventQuery", status);
  cudaGetLastError();  // "not ready" is no error, but the next launch check would take it for one
  check_async(slot.what, &slot);
  return false;
}

void NcclCommunicator::check_async(const Operation& what, Slot* slot) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
  if (asked != ncclSuccess) fail_nccl_call(what, slot, "ncclCommGetAsyncError", asked, true);
  if (state != ncclSuccess && state != ncclInProgress) {
    fail_nccl_call(what, slot, "an operation in flight", state, true);
  }
}

void NcclCommunicator::finish(Slot& slot) {
  FlightRecorder::instance().end(slot.what.flight);
  if (slot.trace_start_us >= 0) {
    // The communicator's name stands as the span's category: it outlives the trace.
    trace::Recorder::instance().add(op_name(slot.what.op).data(), name_.c_str(), slot.what.peer,
                                    slot.trace_start_us);
  }
  release(slot);
}

void NcclCommunicator::fail_nccl_call(const Operation& what, Slot* slot, const char* call,
                                      ncclResult_t result, bool fatal) {
  const std::string message = fmt::format("NCCL error in {} on rank {}: {}", describe(what),
                                          world_rank_, nccl_failure(call, result, comm_));
  if (slot != nullptr) release(*slot);
  if (fatal || !leaves_communicator_usable(result)) abort_nccl(message);
  throw Error(message);
}

void NcclCommunicator::fail_cuda_call(Slot* slot, const char* call, cudaError_t status) {
  if (slot != nullptr) release(*slot);
  fail("CUDA: {} failed on rank {} in the NCCL communicator {}: {} ({})", call, world_rank_, name_,
       cudaGetErrorString(status), cudaGetErrorName(status));
}

void NcclCommunicator::abort_nccl(std::string why) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  aborted_because_ = std::move(why);
}

void NcclCommunicator::time_out(const Operation& what) {
  // The message first: it writes this rank's flight record while the operation is still pending.
  const std::string message = timeout_message(what, timeout_seconds());
  abort_nccl("an operation timed out");
  abort_job(message);
}

std::string NcclCommunicator::describe(const Operation& what) const {
  const std::string text =
      what.step.empty()
          ? Communicator::describe(what.op, what.count, what.type, what.peer, what.tag)
          : std::string(what.step);
  return fmt::format("{} on {} ({} ranks, its rank {})", text, name_, size_, rank_);
}

std::string NcclCommunicator::timeout_message(const Operation& what, double seconds) const {
  const bool message = what.op == Op::kSend || what.op == Op::kRecv;
  const std::string text = what.step.empty()
                               ? Communicator::describe(what.op, what.count, what.type, what.peer,
                                                        what.tag, what.flight.seq)
                               : std::string(what.step);
  const Stall stall{.what = fmt::format("{} on {} ({} ranks)", text, name_, size_),
                    .communicator = what.flight.communicator,
                    .seq = what.flight.seq,
                    .peer = message ? what.peer : -1,
                    .timeout_s = seconds};
  if (std::optional<std::string> report = FlightRecorder::instance().stall_message(stall)) {
    return *report;
  }
  return fmt::format(
      "{} did not complete within {:g} s; another rank has probably failed or stopped",
      describe(what), seconds);
}

}  // namespace tessera::comm
