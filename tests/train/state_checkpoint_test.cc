// Training state reads back by flat range from unsharded and sharded checkpoints alike, and a
// shard layout that does not fit the model is a clear error.
#include "tessera/train/state_checkpoint.h"

#include <gtest/gtest.h>

#include <numeric>

#include "tessera/ckpt/checkpoint.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::train {
namespace {

namespace fs = std::filesystem;

model::ParameterLayout small_layout() {
  model::ParameterLayout layout;
  layout.add("a.weight", {3, 16}, true);
  layout.add("b.bias", {5}, false);
  layout.add("c.weight", {2, 16}, true);
  return layout;
}

// The flat values 0, 1, 2, ... of every part, offset by 1000 for m and 2000 for v.
std::vector<float> flat_values(int64_t total, StatePart part) {
  std::vector<float> v(size_t(total), 0.0f);
  std::iota(v.begin(), v.end(),
            part == StatePart::kParams  ? 0.0f
            : part == StatePart::kAdamM ? 1000.0f
                                        : 2000.0f);
  return v;
}

class StateCheckpoint : public ::testing::Test {
 protected:
  // Writes the flat state as `shards` ranks of a ZeRO stage would, one part per rank.
  fs::path save_sharded(const std::vector<int64_t>& bounds, nlohmann::json zero = {}) {
    const int ranks = int(bounds.size()) - 1;
    if (zero.is_null()) {
      nlohmann::json shards = nlohmann::json::array();
      for (int r = 0; r < ranks; ++r) shards.push_back({bounds[r], bounds[r + 1]});
      zero = {{"stage", 2}, {"ranks", ranks}, {"parameters", layout.total()}, {"shards", shards}};
    }
    ckpt::begin_save(dir, 7);
    for (int r = 0; r < ranks; ++r) {
      std::vector<NamedTensor> tensors;
      for (StatePart part : {StatePart::kParams, StatePart::kAdamM, StatePart::kAdamV}) {
        tensors.push_back(
            {shard_tensor_name(part, r), Tensor{values[int(part)].data() + bounds[r],
                                                Shape{bounds[r + 1] - bounds[r]}, DType::f32}});
      }
      ckpt::write_part(ckpt::pending_step_dir(dir, 7), r, tensors);
    }
    return ckpt::commit_save(dir, 7, ranks, {{"zero", zero}}, 0);
  }

  model::ParameterLayout layout = small_layout();
  std::vector<std::vector<float>> values = {flat_values(layout.total(), StatePart::kParams),
                                            flat_values(layout.total(), StatePart::kAdamM),
                                            flat_values(layout.total(), StatePart::kAdamV)};
  fs::path dir = testing::fresh_test_dir("tessera-state-ckpt");
};

TEST_F(StateCheckpoint, RangesReadAcrossShardBoundaries) {
  const int64_t total = layout.total();
  const fs::path step = save_sharded({0, 32, 64, total});
  for (StatePart part : {StatePart::kParams, StatePart::kAdamM, StatePart::kAdamV}) {
    for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, total}, {20, 70}, {33, 40}}) {
      std::vector<float> out(size_t(end - begin), -1.0f);
      read_state_range(step, layout, part, begin, end, out.data());
      EXPECT_EQ(out, std::vector<float>(values[int(part)].begin() + begin,
                                        values[int(part)].begin() + end));
    }
  }
}

TEST_F(StateCheckpoint, NamedTensorsReadByRange) {
  std::vector<NamedTensor> tensors;
  for (StatePart part : {StatePart::kParams, StatePart::kAdamM}) {
    for (NamedTensor& t :
         model::named_views(layout, values[int(part)].data(), state_part_prefix(part))) {
      tensors.push_back(std::move(t));
    }
  }
  const fs::path step = ckpt::save(dir, 3, tensors, {}, 0);
  // The range straddles a.weight's end and b.bias's padding, which reads as zero.
  const model::ParamInfo& b = layout.find("b.bias");
  std::vector<float> out(10, -1.0f);
  read_state_range(step, layout, StatePart::kAdamM, b.offset - 4, b.offset + 6, out.data());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(out[i], i < 9 ? values[1][b.offset - 4 + i] : 0.0f) << i;
  }
}

TEST_F(StateCheckpoint, ShardsOfAnotherModelAreAnError) {
  nlohmann::json zero = {{"parameters", layout.total() + 16},
                         {"shards", {{0, layout.total() + 16}}}};
  const fs::path step = save_sharded({0, layout.total()}, zero);
  std::vector<float> out(static_cast<size_t>(layout.total()));
  testing::expect_error(
      [&] { read_state_range(step, layout, StatePart::kParams, 0, 8, out.data()); },
      {"written for another model configuration"});
}

TEST_F(StateCheckpoint, ShardsWithAGapAreAnError) {
  const int64_t total = layout.total();
  nlohmann::json zero = {{"parameters", total}, {"shards", {{0, 32}, {48, total}}}};
  const fs::path step = save_sharded({0, 32, total}, zero);
  std::vector<float> out(static_cast<size_t>(total));
  testing::expect_error(
      [&] { read_state_range(step, layout, StatePart::kParams, 0, 8, out.data()); },
      {"zero.shards[1] = [48, 96] does not continue the shards before it at 32"});
}

}  // namespace
}  // namespace tessera::train
