// Training state reads back into any layout by flat range: from unsharded checkpoints, from
// ZeRO shards of the canonical flat layout, and from placed pieces of tensor- and expert-parallel
// slices; what does not fit the model is a clear error.
#include "tessera/ckpt/state_reader.h"

#include <gtest/gtest.h>

#include "tessera/ckpt/checkpoint.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::ckpt {
namespace {

namespace fs = std::filesystem;

model::ModelConfig small_config(bool moe = false) {
  model::ModelConfig c;
  c.arch = model::Architecture::kLlama;
  c.vocab_size = 37;  // no tp above 1 divides it: the vocabulary is padded
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.d_model = 16;
  c.ffn_hidden = 24;
  c.max_seq = 8;
  c.tie_embeddings = false;
  if (moe) c.moe.n_experts = 4;
  return c;
}

// A value for each element of the whole model, by its place: parameter index and element.
float canonical_value(const model::ParamInfo& p, int64_t global_element, StatePart part) {
  return float(p.global_index * 10000 + global_element) + 0.25f * float(int(part));
}

// The values of every part over a layout: each element its canonical value (padding 0).
std::vector<float> values_of(const model::ModelLayout& layout, const model::ModelLayout& canonical,
                             StatePart part) {
  std::vector<float> v(size_t(layout.params.total()), 0.0f);
  for (const model::ParamInfo& p : layout.params.entries()) {
    const model::ParamInfo& c = canonical.params.find(p.name);
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      const int64_t g = p.placement.global_index(i);
      if (g >= 0) v[p.offset + i] = canonical_value(c, g, part);
    }
  }
  return v;
}

class StateReader : public ::testing::Test {
 protected:
  fs::path dir = testing::fresh_test_dir("tessera-state-reader");
};

TEST_F(StateReader, NamedTensorsReadByRangeIntoAnyLayout) {
  const model::ModelConfig c = small_config();
  const model::ModelLayout canonical = model::canonical_model_layout(c);
  std::vector<std::vector<float>> values;
  std::vector<NamedTensor> tensors;
  for (StatePart part : kStateParts) {
    values.push_back(values_of(canonical, canonical, part));
    for (NamedTensor& t :
         model::named_views(canonical.params, values.back().data(), state_part_prefix(part))) {
      tensors.push_back(std::move(t));
    }
  }
  const fs::path step = save(dir, 3, tensors, {}, 0);
  for (int64_t tp : {1, 2, 4}) {
    for (int64_t rank = 0; rank < tp; ++rank) {
      const model::ModelLayout target = model::model_layout(c, {tp, rank, 1, 0});
      for (StatePart part : kStateParts) {
        const std::vector<float> want = values_of(target, canonical, part);
        std::vector<float> out(want.size(), -1.0f);
        read_state_range(step, c, target.params, part, 0, target.params.total(), out.data());
        EXPECT_EQ(out, want) << "tp " << tp << " rank " << rank;
        // A range that starts and ends inside parameters.
        std::vector<float> part_out(20, -1.0f);
        read_state_range(step, c, target.params, part, 30, 50, part_out.data());
        EXPECT_EQ(part_out, std::vector<float>(want.begin() + 30, want.begin() + 50));
      }
    }
  }
}

// Every rank of a (tp, ep) mesh writes its slice's parameters in two pieces; any other layout
// reads them back.
TEST_F(StateReader, PlacedPiecesLoadOnAnyLayout) {
  const model::ModelConfig c = small_config(/*moe=*/true);
  const model::ModelLayout canonical = model::canonical_model_layout(c);
  const int64_t tp = 2, ep = 2;
  std::vector<model::ModelLayout> slices;
  for (int64_t e = 0; e < ep; ++e) {
    for (int64_t t = 0; t < tp; ++t) slices.push_back(model::model_layout(c, {tp, t, ep, e}));
  }
  begin_save(dir, 5);
  std::vector<PlacedPiece> pieces;
  std::vector<std::vector<float>> keep;
  int part_index = 0;
  for (const model::ModelLayout& s : slices) {
    const int64_t half = s.params.total() / 2 / 16 * 16;
    std::vector<NamedTensor> tensors;
    for (auto [b, e] : {std::pair<int64_t, int64_t>{0, half}, {half, s.params.total()}}) {
      const std::string name = fmt::format("piece{}", pieces.size());
      pieces.push_back({name, slice_name(s), b, e});
      for (StatePart part : kStateParts) {
        std::vector<float>& v = keep.emplace_back(values_of(s, canonical, part));
        tensors.push_back(
            {placed_tensor_name(name, part), Tensor{v.data() + b, Shape{e - b}, DType::f32}});
      }
    }
    write_part(pending_step_dir(dir, 5), part_index++, tensors);
  }
  std::vector<const model::ModelLayout*> views;
  for (const model::ModelLayout& s : slices) views.push_back(&s);
  const nlohmann::json meta = {{"placed", placed_metadata(views, pieces, {{"tp", tp}})}};
  const fs::path step = commit_save(dir, 5, part_index, meta, 0);

  for (const model::Sharding target_sharding :
       {model::Sharding{}, model::Sharding{4, 3, 1, 0}, model::Sharding{1, 0, 4, 1}}) {
    const model::ModelLayout target = model::model_layout(c, target_sharding);
    for (StatePart part : kStateParts) {
      const std::vector<float> want = values_of(target, canonical, part);
      std::vector<float> out(want.size(), -1.0f);
      read_state_range(step, c, target.params, part, 0, target.params.total(), out.data());
      EXPECT_EQ(out, want) << "tp " << target_sharding.tp << " ep " << target_sharding.ep;
    }
  }
}

// The format of earlier releases: ZeRO shards of the canonical flat layout.
TEST_F(StateReader, CanonicalShardsReadAcrossShardBoundaries) {
  const model::ModelConfig c = small_config();
  const model::ModelLayout canonical = model::canonical_model_layout(c);
  const int64_t total = canonical.params.total();
  const std::vector<int64_t> bounds = {0, 320, 1024, total};
  std::vector<std::vector<float>> values;
  for (StatePart part : kStateParts) values.push_back(values_of(canonical, canonical, part));
  begin_save(dir, 7);
  nlohmann::json shards = nlohmann::json::array();
  for (int r = 0; r + 1 < int(bounds.size()); ++r) {
    std::vector<NamedTensor> tensors;
    for (StatePart part : kStateParts) {
      tensors.push_back(
          {shard_tensor_name(part, r), Tensor{values[int(part)].data() + bounds[r],
                                              Shape{bounds[r + 1] - bounds[r]}, DType::f32}});
    }
    write_part(pending_step_dir(dir, 7), r, tensors);
    shards.push_back({bounds[r], bounds[r + 1]});
  }
  const fs::path step = commit_save(
      dir, 7, 3, {{"zero", {{"stage", 2}, {"parameters", total}, {"shards", shards}}}}, 0);
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, total}, {300, 1100}, {330, 340}}) {
    std::vector<float> out(size_t(end - begin), -1.0f);
    read_state_range(step, c, canonical.params, StatePart::kAdamV, begin, end, out.data());
    EXPECT_EQ(out, std::vector<float>(values[2].begin() + begin, values[2].begin() + end));
  }
}

TEST_F(StateReader, CheckpointsOfAnotherModelAreErrors) {
  const model::ModelConfig c = small_config();
  const model::ModelLayout canonical = model::canonical_model_layout(c);
  const int64_t total = canonical.params.total();
  std::vector<float> v(size_t(total + 16), 1.0f);
  begin_save(dir, 9);
  write_part(pending_step_dir(dir, 9), 0,
             {{shard_tensor_name(StatePart::kParams, 0),
               Tensor{v.data(), Shape{total + 16}, DType::f32}}});
  const fs::path step = commit_save(
      dir, 9, 1, {{"zero", {{"parameters", total + 16}, {"shards", {{0, total + 16}}}}}}, 0);
  std::vector<float> out(static_cast<size_t>(total));
  testing::expect_error(
      [&] { read_state_range(step, c, canonical.params, StatePart::kParams, 0, 8, out.data()); },
      {"written for another model configuration"});
  // Named tensors of another shape.
  model::ModelConfig wider = c;
  wider.d_model = 32;
  wider.n_head = 4;
  std::vector<float> w(size_t(model::canonical_model_layout(wider).params.total()), 0.0f);
  const fs::path named = save(
      dir, 10, model::named_views(model::canonical_model_layout(wider).params, w.data()), {}, 0);
  testing::expect_error(
      [&] { read_state_range(named, c, canonical.params, StatePart::kParams, 0, 8, out.data()); },
      {"wte.weight"});
}

}  // namespace
}  // namespace tessera::ckpt
