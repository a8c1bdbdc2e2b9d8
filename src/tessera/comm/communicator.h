// The distributed layer: communicators between the ranks of a job and the mesh that arranges
// them into data-, tensor-, pipeline- and expert-parallel groups. It moves buffers between ranks
// and never interprets them: what a buffer holds is the concern of the layers above.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/comm/flight_recorder.h"
#include "tessera/core/dtype.h"

namespace tessera::comm {

class Communicator;

// A non-blocking operation in flight. It is a plain value: copying it does not duplicate the
// operation, and only the communicator that started it may complete it, once.
struct Request {
  const Communicator* owner = nullptr;
  int32_t slot = -1;
  uint32_t generation = 0;

  bool pending() const { return owner != nullptr; }
};

// The ranks of a job, or a group of them. Every operation is collective over all ranks of the
// communicator (except send/recv), and ranks must issue the collectives in the same order.
//
// Reductions are sums. bf16 sums are accumulated in f32: the buffer is widened into f32 scratch,
// reduced, and rounded back to bf16 once at the end rather than after every partial sum. Counts are
// in elements of `dtype` and must fit in 32 bits per call.
//
// Non-blocking forms (start_*) return a Request that wait() or test() completes. Until then the
// operation owns its buffers: the caller must neither read nor write them (nor free them).
// Once warm, starting and completing an operation allocates nothing, so they can sit in a
// training step's inner loop.
//
// A blocking call, or a wait, that does not complete within the job's timeout (see launch.h)
// ends the whole job with a message naming the rank and the operation, rather than hanging, and
// once the flight recorder runs (flight_recorder.h), the rank that holds the operation up.
// The blocking forms use MPI's blocking calls, which Open MPI runs several times faster than the
// non-blocking ones, so prefer them wherever there is nothing to overlap.
// Calls come from one thread at a time (MPI_THREAD_SERIALIZED, world.h).
class Communicator {
 public:
  // What an operation does; the backends' calls take it.
  enum class Op : uint8_t {
    kAllReduce,
    kReduceScatter,
    kAllGather,
    kBroadcast,
    kAllToAll,
    kAllToAllV,  // counts holds the send counts, then the receive counts
    kSend,
    kRecv,
    kBarrier,
  };

  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sums `count` elements over all ranks, in place.
  void all_reduce(void* data, int64_t count, DType dtype);
  // The same for f64 metrics (loss sums, token counts) that must not lose precision.
  void all_reduce(double* data, int64_t count);

  // Sums `send` (sum(recv_counts) elements on every rank) over all ranks and delivers the
  // recv_counts[r] elements starting at sum(recv_counts[0..r)) to rank r's `recv`. Counts may be
  // zero, so a bucket can be reduced onto just the ranks that own part of it. `recv` must not
  // overlap `send`.
  void reduce_scatter(const void* send, void* recv, std::span<const int64_t> recv_counts,
                      DType dtype);

  // Concatenates counts[r] elements from each rank r's `send`, in rank order, into every rank's
  // `recv` (sum(counts) elements). `send` may be this rank's part of `recv` (in place);
  // otherwise they must not overlap.
  void all_gather(const void* send, void* recv, std::span<const int64_t> counts, DType dtype);

  // Copies `count` elements from `root` to every rank.
  void broadcast(void* data, int64_t count, DType dtype, int root);

  // Sends the count_per_rank elements at send + r * count_per_rank to rank r, and receives
  // rank r's into recv + r * count_per_rank. The buffers must not overlap.
  void all_to_all(const void* send, void* recv, int64_t count_per_rank, DType dtype);

  // Sends send_counts[r] elements, consecutive in rank order from `send`, to each rank r, and
  // receives recv_counts[r] elements from each, consecutive in rank order into `recv`; each
  // rank's recv_counts[s] must equal rank s's send_counts[r]. The buffers must not overlap.
  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype);

  // Point to point; a recv must receive exactly `count` elements. Tags are >= 0.
  void send(const void* data, int64_t count, DType dtype, int dest, int tag);
  void recv(void* data, int64_t count, DType dtype, int source, int tag);

  void barrier();

  // Collective: ranks passing the same `color` (>= 0) form a new communicator, ranked by `key`
  // and then by rank in this one. `name` ("dp", "tp", ...) stands for it in messages and in the
  // flight record (flight_recorder.h).
  std::unique_ptr<Communicator> split(int color, int key, std::string_view name = "group");

  Request start_all_reduce(void* data, int64_t count, DType dtype);
  Request start_reduce_scatter(const void* send, void* recv, std::span<const int64_t> recv_counts,
                               DType dtype);
  Request start_all_gather(const void* send, void* recv, std::span<const int64_t> counts,
                           DType dtype);
  Request start_send(const void* data, int64_t count, DType dtype, int dest, int tag);
  Request start_recv(void* data, int64_t count, DType dtype, int source, int tag);

  // Blocks until the operation completes; `request` is then no longer pending. Requests may be
  // waited for in any order.
  void wait(Request& request);
  // Completes the operation if it has finished and returns whether it did. MPI moves data only
  // inside MPI calls, so testing now and then during long computations keeps transfers going.
  bool test(Request& request);

 protected:
  Communicator() = default;

  // Arguments are validated before these are called. do_start begins the operation and do_run
  // returns once it is complete.
  virtual Request do_start(Op op, const void* send, void* recv, int64_t count,
                           std::span<const int64_t> counts, DType dtype, int peer, int tag) = 0;
  virtual void do_run(Op op, const void* send, void* recv, int64_t count,
                      std::span<const int64_t> counts, DType dtype, int peer, int tag) = 0;
  // Completes `request` (which this communicator started) if it has finished, or waits for it
  // when `block` is set; returns whether it completed.
  virtual bool do_complete(Request& request, bool block) = 0;
  virtual void do_all_reduce_f64(double* data, int64_t count) = 0;
  // `color` is validated.
  virtual std::unique_ptr<Communicator> do_split(int color, int key, std::string_view name) = 0;

  // Opens the flight record (flight_recorder.h) of an operation this rank starts on the
  // communicator `flight_id`, counting the bytes this rank sends or reduces: its own part of an
  // all-gather, count_per_rank to every rank of an all-to-all.
  FlightTicket record_start(Op op, std::string_view type, int64_t count,
                            std::span<const int64_t> counts, int peer, int tag,
                            size_t element_bytes, int32_t flight_id) const;

  // "all_reduce"
  static std::string_view op_name(Op op);
  // "all_reduce of 1024 bf16 elements", for error messages; with a `seq` above 0, the operation's
  // number on its communicator: "all_reduce #57 of 1024 bf16 elements".
  static std::string describe(Op op, int64_t count, std::string_view type, int peer, int tag,
                              int64_t seq = 0);

 private:
  std::vector<int64_t> all_to_all_counts_;  // reused, so a warm exchange allocates nothing
};

}  // namespace tessera::comm
