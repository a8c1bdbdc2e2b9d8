#include "tessera/comm/mesh.h"

#include <gtest/gtest.h>

#include <vector>

#include "tessera/comm/world.h"
#include "tests/dist/dist_testing.h"

namespace tessera::dist {
namespace {

using testing::expect_error;

// Every way to write the world size as dp x cp x tp x pp, with every ep dividing dp.
std::vector<comm::MeshShape> shapes_of(int64_t ranks) {
  std::vector<comm::MeshShape> shapes;
  for (int64_t dp = 1; dp <= ranks; ++dp) {
    for (int64_t tp = 1; tp <= ranks; ++tp) {
      for (int64_t pp = 1; pp <= ranks; ++pp) {
        for (int64_t cp = 1; cp <= ranks; ++cp) {
          for (int64_t ep = 1; ep <= dp; ++ep) {
            if (dp * cp * tp * pp == ranks && dp % ep == 0) {
              shapes.push_back({.dp = dp, .tp = tp, .pp = pp, .ep = ep, .cp = cp});
            }
          }
        }
      }
    }
  }
  return shapes;
}

// The world ranks of `group`'s members, in the group's rank order.
std::vector<int32_t> members(comm::Communicator& group) {
  std::vector<int32_t> ranks(group.size());
  const std::vector<int64_t> ones(group.size(), 1);
  const int32_t me = comm::world().rank();
  group.all_gather(&me, ranks.data(), ones, DType::i32);
  return ranks;
}

TEST(Mesh, EveryShapeOfTheWorldRoundTripsAndGroupsTheRightRanks) {
  comm::Communicator& w = comm::world();
  for (const comm::MeshShape& shape : shapes_of(w.size())) {
    SCOPED_TRACE(shape.str());
    comm::Mesh mesh(w, shape);
    for (int r = 0; r < w.size(); ++r) EXPECT_EQ(mesh.rank_of(mesh.coords_of(r)), r);
    const comm::MeshCoords me = mesh.coords();
    EXPECT_EQ(me, mesh.coords_of(w.rank()));
    EXPECT_EQ(&mesh.world(), &w);

    struct Axis {
      comm::Communicator& group;
      int64_t size;
      int coord;
      int comm::MeshCoords::*field;
    };
    for (const Axis& axis : {Axis{mesh.dp(), shape.dp, me.dp, &comm::MeshCoords::dp},
                             Axis{mesh.tp(), shape.tp, me.tp, &comm::MeshCoords::tp},
                             Axis{mesh.pp(), shape.pp, me.pp, &comm::MeshCoords::pp},
                             Axis{mesh.cp(), shape.cp, me.cp, &comm::MeshCoords::cp}}) {
      ASSERT_EQ(axis.group.size(), axis.size);
      EXPECT_EQ(axis.group.rank(), axis.coord);
      // Member k shares every coordinate with this rank except its own, which is k.
      const std::vector<int32_t> ranks = members(axis.group);
      for (int k = 0; k < axis.size; ++k) {
        comm::MeshCoords c = me;
        c.*axis.field = k;
        EXPECT_EQ(ranks[k], mesh.rank_of(c));
      }
    }
    // Replicas: the dp x cp ranks of this rank's tp and pp coordinates, cp varying fastest.
    ASSERT_EQ(mesh.replicas().size(), shape.dp * shape.cp);
    EXPECT_EQ(mesh.replicas().rank(), mesh.replica_rank());
    const std::vector<int32_t> replicas = members(mesh.replicas());
    for (int k = 0; k < int(shape.dp * shape.cp); ++k) {
      EXPECT_EQ(replicas[k], mesh.rank_of({k / int(shape.cp), me.tp, me.pp, k % int(shape.cp)}));
    }
    // Expert groups: ep consecutive data-parallel ranks; the ranks holding the same experts are
    // those at the same place in their groups.
    const int ep = int(shape.ep), group = me.dp / ep;
    ASSERT_EQ(mesh.ep().size(), ep);
    EXPECT_EQ(mesh.ep().rank(), mesh.ep_rank());
    const std::vector<int32_t> ep_ranks = members(mesh.ep());
    for (int k = 0; k < ep; ++k) {
      EXPECT_EQ(ep_ranks[k], mesh.rank_of({group * ep + k, me.tp, me.pp, me.cp}));
    }
    ASSERT_EQ(mesh.expert_dp().size(), shape.dp / ep);
    const std::vector<int32_t> holders = members(mesh.expert_dp());
    for (int k = 0; k < shape.dp / ep; ++k) {
      EXPECT_EQ(holders[k], mesh.rank_of({k * ep + me.dp % ep, me.tp, me.pp, me.cp}));
    }
  }
}

TEST(Mesh, TensorParallelVariesFastestThenContextThenDataThenPipeline) {
  comm::Communicator& w = comm::world();
  if (w.size() != 4) GTEST_SKIP() << "needs four ranks";
  // Each pair of adjacent axes in the order: the first one's neighbour is rank 1.
  comm::Mesh tp_dp(w, {.dp = 2, .tp = 2, .ep = 2});
  EXPECT_EQ(tp_dp.coords_of(1), (comm::MeshCoords{.tp = 1}));
  EXPECT_EQ(tp_dp.coords_of(2), (comm::MeshCoords{.dp = 1}));
  comm::Mesh tp_cp(w, {.tp = 2, .cp = 2});
  EXPECT_EQ(tp_cp.coords_of(1), (comm::MeshCoords{.tp = 1}));
  EXPECT_EQ(tp_cp.coords_of(2), (comm::MeshCoords{.cp = 1}));
  comm::Mesh cp_dp(w, {.dp = 2, .cp = 2});
  EXPECT_EQ(cp_dp.coords_of(1), (comm::MeshCoords{.cp = 1}));
  EXPECT_EQ(cp_dp.coords_of(2), (comm::MeshCoords{.dp = 1}));
  comm::Mesh dp_pp(w, {.dp = 2, .pp = 2});
  EXPECT_EQ(dp_pp.coords_of(1), (comm::MeshCoords{.dp = 1}));
  EXPECT_EQ(dp_pp.coords_of(2), (comm::MeshCoords{.pp = 1}));

  // dp=2 x tp=2: tensor-parallel pairs {0,1} and {2,3}, data-parallel pairs {0,2} and {1,3}.
  comm::Mesh mesh(w, {.dp = 2, .tp = 2});
  const int tp_base = w.rank() / 2 * 2;
  EXPECT_EQ(members(mesh.tp()), (std::vector<int32_t>{tp_base, tp_base + 1}));
  EXPECT_EQ(members(mesh.dp()), (std::vector<int32_t>{w.rank() % 2, w.rank() % 2 + 2}));
  EXPECT_EQ(members(mesh.pp()), (std::vector<int32_t>{w.rank()}));
  EXPECT_EQ(members(mesh.ep()), (std::vector<int32_t>{w.rank()}));
  // dp=4 x ep=2: expert groups {0,1} and {2,3}; ranks 0 and 2 hold the same experts.
  comm::Mesh experts(w, {.dp = 4, .ep = 2});
  EXPECT_EQ(members(experts.ep()), (std::vector<int32_t>{w.rank() / 2 * 2, w.rank() / 2 * 2 + 1}));
  EXPECT_EQ(members(experts.expert_dp()), (std::vector<int32_t>{w.rank() % 2, w.rank() % 2 + 2}));
}

TEST(Mesh, ProductMustEqualTheWorldSize) {
  comm::Communicator& w = comm::world();
  const int64_t n = w.size();
  const comm::MeshShape wrong = n == 4 ? comm::MeshShape{.dp = 2} : comm::MeshShape{.dp = n + 1};
  try {
    comm::Mesh mesh(w, wrong);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(
        std::string(e.what()),
        fmt::format("mesh.dp x mesh.cp x mesh.tp x mesh.pp = {0} x 1 x 1 x 1 = {0} ranks, but "
                    "the job has {1} (mpirun -np / srun -n): make the product equal the "
                    "world size",
                    wrong.dp, n));
  }
  expect_error([&] { comm::Mesh mesh(w, {.dp = n, .ep = n + 1}); },
               {"mesh.ep = " + std::to_string(n + 1), "does not divide mesh.dp"});
  expect_error([&] { comm::Mesh mesh(w, {.tp = 0}); }, {"mesh.tp must be >= 1, got 0"});
  expect_error([&] { comm::Mesh mesh(w, {.dp = 1'000'000, .tp = 1'000'000, .pp = 1'000'000}); },
               {"= 1e+18 ranks"});
}

TEST(Mesh, CoordinatesOutsideTheMeshAreErrors) {
  comm::Communicator& w = comm::world();
  comm::Mesh mesh(w, {.dp = w.size()});
  expect_error([&] { mesh.rank_of({.dp = w.size()}); }, {"outside the mesh dp="});
  expect_error([&] { mesh.rank_of({.tp = -1}); }, {"tp=-1"});
  expect_error([&] { mesh.coords_of(w.size()); }, {"rank " + std::to_string(w.size())});
}

}  // namespace
}  // namespace tessera::dist
