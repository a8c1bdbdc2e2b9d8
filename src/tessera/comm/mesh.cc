#include "tessera/comm/mesh.h"

#include <fmt/format.h>

#include "tessera/core/error.h"

namespace tessera::comm {

void check_mesh(const MeshShape& shape, int64_t world_size) {
  for (auto [name, value] :
       {std::pair{"dp", shape.dp}, std::pair{"tp", shape.tp}, std::pair{"pp", shape.pp},
        std::pair{"ep", shape.ep}, std::pair{"cp", shape.cp}}) {
    check(value >= 1, "mesh.{} must be >= 1, got {}", name, value);
  }
  // In floating point, so that absurd sizes cannot overflow on the way to the message.
  const double ranks = static_cast<double>(shape.dp) * shape.cp * shape.tp * shape.pp;
  check(ranks == double(world_size),
        "mesh.dp x mesh.cp x mesh.tp x mesh.pp = {} x {} x {} x {} = {} ranks, but the job has {} "
        "(mpirun -np / srun -n): make the product equal the world size",
        shape.dp, shape.cp, shape.tp, shape.pp, ranks, world_size);
  check(shape.dp % shape.ep == 0,
        "mesh.ep = {} does not divide mesh.dp = {}: expert-parallel ranks are carved out of the "
        "data-parallel ones",
        shape.ep, shape.dp);
}

Mesh::Mesh(Communicator& world, const MeshShape& shape) : world_(world), shape_(shape) {
  check_mesh(shape, world.size());
  coords_ = coords_of(world.rank());
  const MeshCoords& c = coords_;
  const int ep = int(shape.ep), group = c.dp / ep, within = c.dp % ep;
  // The color of an axis group is the rank of its member at coordinate 0 on that axis.
  dp_ = world.split(rank_of({0, c.tp, c.pp, c.cp}), c.dp, "dp");
  tp_ = world.split(rank_of({c.dp, 0, c.pp, c.cp}), c.tp, "tp");
  pp_ = world.split(rank_of({c.dp, c.tp, 0, c.cp}), c.pp, "pp");
  cp_ = world.split(rank_of({c.dp, c.tp, c.pp, 0}), c.cp, "cp");
  ep_ = world.split(rank_of({group * ep, c.tp, c.pp, c.cp}), within, "ep");
  expert_dp_ = world.split(rank_of({within, c.tp, c.pp, c.cp}), group, "expert_dp");
  if (shape.cp > 1) replicas_ = world.split(rank_of({0, c.tp, c.pp, 0}), replica_rank(), "dp_cp");
}

int Mesh::rank_of(const MeshCoords& c) const {
  const MeshShape& s = shape_;
  check(c.dp >= 0 && c.dp < s.dp && c.tp >= 0 && c.tp < s.tp && c.pp >= 0 && c.pp < s.pp &&
            c.cp >= 0 && c.cp < s.cp,
        "mesh coordinates dp={} tp={} pp={} cp={} are outside the mesh {}", c.dp, c.tp, c.pp, c.cp,
        s.str());
  return static_cast<int>(c.tp + s.tp * (c.cp + s.cp * (c.dp + s.dp * c.pp)));
}

MeshCoords Mesh::coords_of(int rank) const { return mesh_coords(shape_, rank); }

MeshCoords mesh_coords(const MeshShape& s, int64_t rank) {
  check(rank >= 0 && rank < s.ranks(), "rank {} is outside the mesh {} of {} ranks", rank, s.str(),
        s.ranks());
  int64_t r = rank;
  MeshCoords c;
  c.tp = static_cast<int>(r % s.tp);
  r /= s.tp;
  c.cp = static_cast<int>(r % s.cp);
  r /= s.cp;
  c.dp = static_cast<int>(r % s.dp);
  c.pp = static_cast<int>(r / s.dp);
  return c;
}

}  // namespace tessera::comm
