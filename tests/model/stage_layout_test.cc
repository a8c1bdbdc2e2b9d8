// A pipeline stage's parameter layout and activations: its blocks under their model-wide names
// and canonical places, the embedding on the first stage, the head (and a tied embedding's copy)
// on the last, and per micro-batch in flight what a stage keeps.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "tessera/core/error.h"
#include "tessera/model/activation_memory.h"
#include "tessera/model/model_layout.h"
#include "tests/model/small_configs.h"

namespace tessera::model {
namespace {

std::set<std::string> names(const ModelLayout& layout) {
  std::set<std::string> out;
  for (const ParamInfo& e : layout.params.entries()) out.insert(e.name);
  return out;
}

ModelConfig six_blocks(ModelConfig c) {
  c.n_layer = 6;
  return c;
}

TEST(StageLayout, StagesHoldTheirBlocksUnderModelNamesAndCanonicalPlaces) {
  for (const ModelConfig& c :
       {six_blocks(small_configs(8).gpt2), six_blocks(small_configs(8).llama),
        six_blocks(small_configs(8).moe)}) {
    const ModelLayout whole = canonical_model_layout(c);
    std::map<std::string, int64_t> canonical;
    for (const ParamInfo& e : whole.params.entries()) canonical[e.name] = e.global_offset;
    std::map<std::string, int> held;
    for (const auto& [begin, end] : {std::pair{0, 1}, std::pair{1, 3}, std::pair{3, 6}}) {
      const ModelLayout stage = model_layout(c, {.block_begin = begin, .block_end = end});
      EXPECT_EQ(stage.first_block, begin);
      EXPECT_EQ(int64_t(stage.blocks.size()), end - begin);
      EXPECT_EQ(stage.has_embedding, begin == 0);
      EXPECT_EQ(stage.has_head, end == 6);
      EXPECT_EQ(stage.units.size(), 1 + stage.blocks.size() * (c.is_moe() ? 2 : 1));
      for (const ParamInfo& e : stage.params.entries()) {
        ++held[e.name];
        ASSERT_TRUE(canonical.count(e.name)) << e.name;
        EXPECT_EQ(e.global_offset, canonical[e.name]) << e.name;
      }
      const std::set<std::string> mine = names(stage);
      EXPECT_EQ(mine.count("blocks.0.ln1.weight"), begin == 0 ? 1u : 0u);
      EXPECT_EQ(mine.count(fmt::format("blocks.{}.ln1.weight", end - 1)), 1u);
      EXPECT_EQ(mine.count("lnf.weight"), end == 6 ? 1u : 0u);
      if (begin > 0 && end < 6) {
        EXPECT_EQ(stage.units[0].size(), 0);
      }
    }
    // Every parameter on exactly one stage, but a tied embedding, which the last stage copies.
    EXPECT_EQ(held.size(), canonical.size());
    for (const auto& [name, count] : held) {
      EXPECT_EQ(count, name == "wte.weight" && c.tie_embeddings ? 2 : 1) << name;
    }
  }
}

TEST(StageLayout, AStageOutsideTheModelIsAnError) {
  const ModelConfig c = six_blocks(small_configs(8).gpt2);
  EXPECT_THROW(model_layout(c, {.block_begin = 4, .block_end = 4}), Error);
  EXPECT_THROW(model_layout(c, {.block_begin = 2, .block_end = 7}), Error);
}

TEST(StageLayout, AStageKeepsItsBlocksAndInputPerMicroBatchAndTheHeadOnlyAtTheEnd) {
  const ModelConfig c = six_blocks(small_configs(8).gpt2);
  const ActivationOptions o{.max_batch = 2, .max_seq = 8, .training = true};
  const ActivationBytes whole = activation_bytes(c, Sharding{}, o);
  const ActivationBytes middle = activation_bytes(c, {.block_begin = 1, .block_end = 3}, o);
  const ActivationBytes last = activation_bytes(c, {.block_begin = 3}, o);
  const int64_t stage_input = 4 * 2 * 8 * c.d_model;
  EXPECT_EQ(whole.per_micro_batch, 6 * whole.saved_per_layer + stage_input);
  EXPECT_EQ(last.per_micro_batch, 3 * last.saved_per_layer + stage_input);
  // A stage without the head sends its output on: the input is kept in its place.
  EXPECT_EQ(middle.per_micro_batch, 2 * middle.saved_per_layer);
  EXPECT_EQ(middle.saved_per_layer, whole.saved_per_layer);
  // The head's logits ([N, vocab] floats) and loss rows are the last stage's alone.
  EXPECT_GT(last.total - 3 * last.saved_per_layer,
            middle.total - 2 * middle.saved_per_layer + 4 * 2 * 8 * c.vocab_size);
}

}  // namespace
}  // namespace tessera::model
