// The mesh arranges a job's ranks into a 4-D grid of data-parallel (dp), context-parallel (cp),
// tensor-parallel (tp) and pipeline-parallel (pp) coordinates, the data-parallel ranks further
// split into expert-parallel groups of ep, with one communicator per axis.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/comm/communicator.h"
#include "tessera/comm/mesh_shape.h"

namespace tessera::comm {

struct MeshCoords {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  int cp = 0;

  bool operator==(const MeshCoords&) const = default;
};

// Ranks are laid out with tp varying fastest, then cp, then dp, then pp:
//
//   rank = tp + TP * (cp + CP * (dp + DP * pp))
//
// so the ranks of a tensor-parallel group, which communicate in every layer, are neighbours
// (the same node when ranks are placed by node), then the context-parallel ranks, which exchange
// keys and values in every layer, and pipeline stages, which exchange only activations at stage
// boundaries, are furthest apart (Megatron-LM's tp-cp-dp-pp order). Data-parallel coordinate d
// is expert coordinate d % EP of expert-parallel group d / EP: an expert-parallel group is EP
// consecutive data-parallel ranks, and the ranks holding the same experts (the
// expert-data-parallel group) are those with equal d % EP.
//
// The communicator of an axis holds the ranks that share every other coordinate, ranked by
// their coordinate on that axis.
class Mesh {
 public:
  // Collective over `world`, which must outlive the mesh. Throws an Error, the same on every
  // rank, when the shape's product is not the world size or ep does not divide dp.
  Mesh(Communicator& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  // This rank's coordinates.
  const MeshCoords& coords() const { return coords_; }
  int ep_rank() const { return coords_.dp % int(shape_.ep); }

  int rank_of(const MeshCoords& coords) const;
  MeshCoords coords_of(int rank) const;

  Communicator& world() const { return world_; }
  Communicator& dp() const { return *dp_; }
  Communicator& tp() const { return *tp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& cp() const { return *cp_; }
  Communicator& ep() const { return *ep_; }
  // The ranks holding the same parameters, which split a step's tokens: dp x cp, ranked by
  // replica_rank(). Their gradients are summed and their optimizer states sharded over it. The
  // dp communicator itself where cp is 1.
  Communicator& replicas() const { return replicas_ != nullptr ? *replicas_ : *dp_; }
  int replica_rank() const { return coords_.dp * int(shape_.cp) + coords_.cp; }
  // The dp / ep ranks holding the same experts, over which expert gradients are reduced.
  Communicator& expert_dp() const { return *expert_dp_; }

 private:
  Communicator& world_;
  MeshShape shape_;
  MeshCoords coords_;
  std::unique_ptr<Communicator> dp_, tp_, pp_, cp_, ep_, expert_dp_;
  std::unique_ptr<Communicator> replicas_;  // where cp > 1
};

// The coordinates of `rank` in a mesh of this shape, as Mesh lays them out.
MeshCoords mesh_coords(const MeshShape& shape, int64_t rank);

// Throws the error Mesh would for this shape and world size, naming the keys at fault.
void check_mesh(const MeshShape& shape, int64_t world_size);

}  // namespace tessera::comm
