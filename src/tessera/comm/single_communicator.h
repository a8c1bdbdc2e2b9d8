// The communicator of a job with one rank, used when no MPI launcher started the process, so a
// single-process run needs no MPI at all.
#pragma once

#include "tessera/comm/communicator.h"

namespace tessera::comm {

// Collectives over one rank are copies or nothing; send and recv have no peer and are errors.
// Operations complete when started, so wait has nothing left to do.
class SingleCommunicator final : public Communicator {
 public:
  SingleCommunicator() = default;

  int rank() const override { return 0; }
  int size() const override { return 1; }

 private:
  Request do_start(Op op, const void* send, void* recv, int64_t count,
                   std::span<const int64_t> counts, DType dtype, int peer, int tag) override;
  void do_run(Op op, const void* send, void* recv, int64_t count, std::span<const int64_t> counts,
              DType dtype, int peer, int tag) override;
  bool do_complete(Request& request, bool block) override;
  void do_all_reduce_f64(double*, int64_t) override {}
  std::unique_ptr<Communicator> do_split(int, int, std::string_view) override;
};

}  // namespace tessera::comm
