#include "tessera/dist/mesh.h"

#include <fmt/format.h>

#include "tessera/core/error.h"

namespace tessera::dist {

Mesh::Mesh(Communicator& world, const MeshShape& shape) : world_(world), shape_(shape) {
  for (auto [name, value] : {std::pair{"dp", shape.dp}, std::pair{"tp", shape.tp},
                             std::pair{"pp", shape.pp}, std::pair{"ep", shape.ep}}) {
    check(value >= 1, "mesh.{} must be >= 1, got {}", name, value);
  }
  // In floating point, so that absurd sizes cannot overflow on the way to the message.
  const double ranks = static_cast<double>(shape.dp) * shape.tp * shape.pp * shape.ep;
  check(ranks == world.size(),
        "mesh.dp x mesh.tp x mesh.pp x mesh.ep = {} x {} x {} x {} = {} ranks, but the job has {} "
        "(mpirun -np / srun -n): make the product equal the world size",
        shape.dp, shape.tp, shape.pp, shape.ep, ranks, world.size());
  coords_ = coords_of(world.rank());
  const MeshCoords& c = coords_;
  // The color of an axis group is the rank of its member at coordinate 0 on that axis.
  dp_ = world.split(rank_of({0, c.tp, c.pp, c.ep}), c.dp);
  tp_ = world.split(rank_of({c.dp, 0, c.pp, c.ep}), c.tp);
  pp_ = world.split(rank_of({c.dp, c.tp, 0, c.ep}), c.pp);
  ep_ = world.split(rank_of({c.dp, c.tp, c.pp, 0}), c.ep);
}

int Mesh::rank_of(const MeshCoords& c) const {
  const MeshShape& s = shape_;
  check(c.dp >= 0 && c.dp < s.dp && c.tp >= 0 && c.tp < s.tp && c.pp >= 0 && c.pp < s.pp &&
            c.ep >= 0 && c.ep < s.ep,
        "mesh coordinates dp={} tp={} pp={} ep={} are outside the mesh {}", c.dp, c.tp, c.pp, c.ep,
        s.str());
  return static_cast<int>(c.tp + s.tp * (c.ep + s.ep * (c.dp + s.dp * c.pp)));
}

MeshCoords Mesh::coords_of(int rank) const {
  const MeshShape& s = shape_;
  check(rank >= 0 && rank < s.ranks(), "rank {} is outside the mesh {} of {} ranks", rank, s.str(),
        s.ranks());
  int64_t r = rank;
  MeshCoords c;
  c.tp = static_cast<int>(r % s.tp);
  r /= s.tp;
  c.ep = static_cast<int>(r % s.ep);
  r /= s.ep;
  c.dp = static_cast<int>(r % s.dp);
  c.pp = static_cast<int>(r / s.dp);
  return c;
}

}  // namespace tessera::dist
