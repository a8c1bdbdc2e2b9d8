// The time a collective takes, in the terms of NCCL's own cost model (src/graph/tuning.cc): each
// message pays a fixed start and a latency per step of its algorithm on each link class, and moves
// its bytes at that link's bandwidth. An all-reduce takes the faster of a ring and a tree, as
// NCCL's tuner chooses by message size and rank count; an all-gather or a reduce-scatter has only
// the ring.
#pragma once

#include <cstdint>

#include "tessera/plan/hardware.h"

namespace tessera::plan {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter };
enum class CollectiveAlgorithm { kRing, kTree };

// `messages` collectives of one kind over `ranks` ranks, together moving a buffer of `bytes` per
// rank in equal parts, where `per_domain` consecutive ranks share a scale-up domain.
struct Collective {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  double bytes = 0;
  double messages = 1;
  int64_t ranks = 1;
  int64_t per_domain = 1;
};

struct CollectiveTime {
  double seconds = 0;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::kRing;
};

CollectiveTime collective_time(const Collective& c, const Accelerator& a);

const char* algorithm_name(CollectiveAlgorithm algorithm);

}  // namespace tessera::plan
