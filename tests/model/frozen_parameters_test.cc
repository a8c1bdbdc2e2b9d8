// A LoRA run's frozen model: as the model reads it, or with each block's matrices in q8_0 blocks,
// widened a block at a time; the bytes it holds are those its layout predicts.
#include "tessera/model/frozen_parameters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/low_precision.h"
#include "tests/expect_error.h"
#include "tests/model/q8_0_round_trip.h"
#include "tests/model/small_configs.h"

namespace tessera::model {
namespace {

ModelConfig q8_0_lora(ModelConfig c, const std::string& targets) {
  c.d_model = 32;
  c.ffn_hidden = 64;
  c.lora.rank = 2;
  c.lora.targets = targets;
  c.lora.quantize = FrozenWeights::kQ8_0;
  return c;
}

std::vector<float> initial_values(const ModelLayout& layout) {
  std::vector<float> v(size_t(layout.params.total()));
  initial_parameters(layout, 5, 0, layout.params.total(), v.data());
  return v;
}

void assign(FrozenParameters& store, const std::vector<float>& values) {
  store.assign([&](int64_t begin, int64_t end, float* to) {
    std::copy(values.begin() + begin, values.begin() + end, to);
  });
}

// The values the model must read: each block matrix through q8_0 and back, the rest unchanged.
std::vector<float> as_read(const ModelLayout& layout, std::vector<float> v) {
  round_trip_q8_0_matrices(layout, v);
  return v;
}

void expect_reads(FrozenParameters& store, const ModelLayout& layout,
                  const std::vector<float>& want, int64_t unit) {
  const ParameterUnit& u = layout.units[unit];
  const ParameterStore::Weights w = store.acquire(unit);
  ASSERT_NE(w.low, nullptr);
  std::vector<uint16_t> low(size_t(u.size()));
  kernels::cast_to_low(kernels::kCpuContext, want.data() + u.begin, low.data(), u.size(),
                       kernels::LowPrecision::kBf16);
  for (int64_t i = 0; i < u.size(); ++i) {
    ASSERT_EQ(w.f32[i], want[u.begin + i]) << "unit " << unit << " at " << i;
    ASSERT_EQ(w.low[i], low[i]) << "unit " << unit << " at " << i;
  }
  store.release(unit);
}

TEST(FrozenParameters, HoldsBlockMatricesInQ8_0AndReadsThemWidened) {
  const ModelLayout layout = model_layout(q8_0_lora(small_configs(8).llama, "attention,mlp"));
  const std::vector<float> values = initial_values(layout);
  FrozenParameters store(kernels::kCpuContext, layout, Precision::kBf16);
  assign(store, values);
  const std::vector<float> want = as_read(layout, values);
  ASSERT_NE(want, values);
  EXPECT_EQ(layout.first_adapter_unit, 3);
  for (int64_t unit : {0, 1, 2, 1}) expect_reads(store, layout, want, unit);

  // f32 and bf16 for the embeddings and head and for the working space of one block; each block's
  // matrices at 34 bytes per 32 values and its norms in f32. Without q8_0: 6 bytes a value.
  const int64_t blocks = layout.adapters_begin - layout.units[1].begin, norms = 2 * 2 * 32;
  const int64_t expected = 6 * (layout.units[0].size() + layout.units[1].size()) +
                           (blocks - norms) / 32 * 34 + 4 * norms;
  EXPECT_EQ(store.bytes(), expected);
  EXPECT_EQ(FrozenParameters::bytes(layout, Precision::kBf16), expected);
  // Without q8_0, in bf16: the blocks' linear matrices in bf16 alone (2 bytes), their norms in
  // f32, and the same working space; in f32 every value as the model reads it.
  ModelConfig dense = q8_0_lora(small_configs(8).llama, "attention,mlp");
  dense.lora.quantize = FrozenWeights::kPrecision;
  EXPECT_EQ(
      FrozenParameters::bytes(model_layout(dense), Precision::kBf16),
      6 * (layout.units[0].size() + layout.units[1].size()) + 2 * (blocks - norms) + 4 * norms);
  EXPECT_EQ(FrozenParameters::bytes(model_layout(dense), Precision::kF32),
            4 * layout.adapters_begin);
}

// In a low precision the blocks' linear matrices are held in it alone: the model reads their
// bf16 values exactly, and no f32 of them (NaN, were it read).
TEST(FrozenParameters, Bf16BlocksHoldTheirMatricesInBf16Alone) {
  ModelConfig c = q8_0_lora(small_configs(8).llama, "attention,mlp");
  c.lora.quantize = FrozenWeights::kPrecision;
  const ModelLayout layout = model_layout(c);
  const std::vector<float> values = initial_values(layout);
  FrozenParameters store(kernels::kCpuContext, layout, Precision::kBf16);
  assign(store, values);
  const ParameterUnit& u = layout.units[1];
  const ParameterStore::Weights w = store.acquire(1);
  std::vector<uint16_t> low(size_t(u.size()));
  kernels::cast_to_low(kernels::kCpuContext, values.data() + u.begin, low.data(), u.size(),
                       kernels::LowPrecision::kBf16);
  const std::vector<int64_t> linears = linear_weight_offsets(layout);
  for (int64_t i = 0; i < u.size(); ++i) {
    ASSERT_EQ(w.low[i], low[i]) << i;
    const bool in_linear = std::any_of(linears.begin(), linears.end(), [&](int64_t o) {
      return u.begin + i >= o && u.begin + i < o + layout.params.at_offset(o).shape.numel();
    });
    if (in_linear) {
      ASSERT_TRUE(std::isnan(w.f32[i])) << i;
    } else {
      ASSERT_EQ(w.f32[i], values[u.begin + i]) << i;
    }
  }
  store.release(1);
  EXPECT_EQ(store.bytes(), FrozenParameters::bytes(layout, Precision::kBf16));
}

TEST(FrozenParameters, TheModelReadsOneBlockAtATime) {
  const ModelLayout layout = model_layout(q8_0_lora(small_configs(8).llama, "attention"));
  FrozenParameters store(kernels::kCpuContext, layout, Precision::kF32);
  store.assign([&](int64_t begin, int64_t end, float* to) {
    initial_parameters(layout, 5, begin, end, to);
  });
  const float* first = store.acquire(1).f32;
  EXPECT_EQ(store.acquire(1).f32, first);  // held twice: read again, not widened again
  store.release(1);
  EXPECT_THROW(store.acquire(2), Error);
  store.release(1);
  EXPECT_THROW(store.release(1), Error);
  EXPECT_NO_THROW(store.acquire(2));
  store.release(2);
}

TEST(FrozenParameters, AMixturesBlockReadsItsDenseUnitAndItsExpertsTogether) {
  const ModelLayout layout = model_layout(q8_0_lora(small_configs(8).moe, "attention,experts"));
  const std::vector<float> values = initial_values(layout);
  FrozenParameters store(kernels::kCpuContext, layout, Precision::kBf16);
  assign(store, values);
  const std::vector<float> want = as_read(layout, values);
  for (int64_t l = 0; l < 2; ++l) {
    const std::array<int64_t, 4> units = layout.block_units(l);
    store.acquire(units[0]);
    expect_reads(store, layout, want, units[1]);
    store.release(units[0]);
    expect_reads(store, layout, want, units[0]);
  }
  EXPECT_EQ(store.bytes(), FrozenParameters::bytes(layout, Precision::kBf16));
}

TEST(FrozenParameters, RowsThatAreNotWholeQ8_0BlocksAreRefusedByName) {
  ModelConfig c = q8_0_lora(small_configs(8).llama, "attention");
  c.d_model = 16;
  testing::expect_error(
      [&] { FrozenParameters(kernels::kCpuContext, model_layout(c), Precision::kF32); },
      {"train.lora_quantize", "blocks.0.attn.qkv.weight", "16 values wide"});
}

}  // namespace
}  // namespace tessera::model
