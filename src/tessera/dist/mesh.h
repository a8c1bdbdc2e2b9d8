// The mesh arranges a job's ranks into a 4-D grid of data-parallel (dp), tensor-parallel (tp),
// pipeline-parallel (pp) and expert-parallel (ep) coordinates, with one communicator per axis.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tessera/dist/communicator.h"
#include "tessera/dist/mesh_shape.h"

namespace tessera::dist {

struct MeshCoords {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  int ep = 0;

  bool operator==(const MeshCoords&) const = default;
};

// Ranks are laid out with tp varying fastest, then ep, then dp, then pp:
//
//   rank = tp + TP * (ep + EP * (dp + DP * pp))
//
// so the ranks of a tensor-parallel group, which communicate in every layer, are neighbours
// (the same node when ranks are placed by node), and pipeline stages, which exchange only
// activations at stage boundaries, are furthest apart.
//
// The communicator of an axis holds the ranks that share every other coordinate, ranked by
// their coordinate on that axis.
class Mesh {
 public:
  // Collective over `world`, which must outlive the mesh. Throws an Error when the shape's
  // product is not the world size; every rank throws the same one.
  Mesh(Communicator& world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  // This rank's coordinates.
  const MeshCoords& coords() const { return coords_; }

  int rank_of(const MeshCoords& coords) const;
  MeshCoords coords_of(int rank) const;

  Communicator& world() const { return world_; }
  Communicator& dp() const { return *dp_; }
  Communicator& tp() const { return *tp_; }
  Communicator& pp() const { return *pp_; }
  Communicator& ep() const { return *ep_; }

 private:
  Communicator& world_;
  MeshShape shape_;
  MeshCoords coords_;
  std::unique_ptr<Communicator> dp_;
  std::unique_ptr<Communicator> tp_;
  std::unique_ptr<Communicator> pp_;
  std::unique_ptr<Communicator> ep_;
};

}  // namespace tessera::dist
