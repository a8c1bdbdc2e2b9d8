#pragma once

#include <cstdint>
#include <span>

#include "tessera/model/model_layout.h"
#include "tessera/model/sequence_split.h"

namespace tessera::model {

// What a model split over several ranks needs from them: sums, gathers and exchanges of f32
// buffers over one group. The distributed layer implements it over its communicators; the model
// never sees how. Every call is collective over the group, in the same order on every rank.
class Collectives {
 public:
  virtual ~Collectives() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Wall seconds its calls have taken so far: communication the model could not hide, since every
  // call blocks.
  virtual double seconds() const = 0;
  // Sums n elements over the group, in place.
  virtual void all_reduce(float* data, int64_t n) = 0;
  virtual void all_reduce(double* data, int64_t n) = 0;
  // recv = every rank's n elements of send, in rank order. send may be rank()'s part of recv.
  virtual void all_gather(const float* send, float* recv, int64_t n) = 0;
  // Sums send (size() * n elements) over the group and gives rank r elements [r n, (r+1) n).
  virtual void reduce_scatter(const float* send, float* recv, int64_t n) = 0;
  // Sends send_counts[r] elements, consecutive in rank order, to each rank r, and receives
  // recv_counts[r] from each, consecutive in rank order. Counts are per rank and may be zero.
  virtual void all_to_all(const float* send, std::span<const int64_t> send_counts, float* recv,
                          std::span<const int64_t> recv_counts) = 0;
};

// One rank alone: every collective is a copy.
class SingleRank final : public Collectives {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  double seconds() const override { return 0; }
  void all_reduce(float*, int64_t) override {}
  void all_reduce(double*, int64_t) override {}
  void all_gather(const float* send, float* recv, int64_t n) override;
  void reduce_scatter(const float* send, float* recv, int64_t n) override;
  void all_to_all(const float* send, std::span<const int64_t> send_counts, float* recv,
                  std::span<const int64_t> recv_counts) override;
};

// How a model is split over ranks, and the groups it talks to. Every pointer must outlive the
// model; each group defaults to this rank alone.
struct ModelParallel {
  Sharding sharding;
  Collectives* tp = nullptr;  // the tensor-parallel group, ranked by sharding.tp_rank
  // Norms, residual additions and the MoE layer run on 1/tp of the tokens, with all-gathers and
  // reduce-scatters in place of the tensor-parallel all-reduces (Megatron's sequence parallelism).
  bool sequence_parallel = false;
  Collectives* ep = nullptr;  // the expert-parallel group, ranked by sharding.ep_rank
  // The data-parallel ranks, which split a micro-batch's sequences, in token order: MoE routing
  // capacity and load-balancing statistics are taken over all of their tokens. (Every
  // tensor-parallel rank runs the mixture of experts over its group's tokens in full.)
  Collectives* batch = nullptr;
  // The context-parallel group: each sequence is split over its ranks (SequenceSplit), which
  // all-gather keys and values for attention and hold the same parameters. Training only.
  Collectives* cp = nullptr;

  SequenceSplit sequence_split() const {
    return cp != nullptr ? SequenceSplit{cp->size(), cp->rank()} : SequenceSplit{};
  }
};

}  // namespace tessera::model
