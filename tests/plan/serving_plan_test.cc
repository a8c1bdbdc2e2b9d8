// `tessera plan --serve`: the memory it plans is what the server allocates, and Llama 3 70B plans
// on GPUs and TPUs within what their memory and bandwidth allow.
#include <gtest/gtest.h>

#include "tessera/core/threading.h"
#include "tessera/model/serving_memory.h"
#include "tessera/model/transformer.h"
#include "tessera/plan/cost_model.h"
#include "tessera/plan/serving.h"
#include "tessera/serve/engine.h"
#include "tessera/tokenizer/tokenizer.h"
#include "tests/shipped_config.h"

namespace tessera::plan {
namespace {

using testing::shipped_model;

void expect_within_2_percent(double planned, double allocated, const std::string& what) {
  EXPECT_GT(allocated, 0) << what;
  EXPECT_NEAR(planned, allocated, 0.02 * allocated) << what;
}

// The server's own path: the inference model serve builds for its step size, and the engine,
// which sizes and allocates the KV cache.
TEST(ServingPlan, MemoryIsWhatTheServerAllocates) {
  struct Format {
    model::Precision precision;
    model::WeightFormat weights;
    kernels::KvDtype kv = kernels::KvDtype::kF32;
  };
  for (const std::string file : {"tiny.toml", "llama-tiny.toml"}) {
    const model::ModelConfig config = shipped_model(file);
    for (const Format f :
         {Format{model::Precision::kF32, model::WeightFormat::kDense},
          Format{model::Precision::kBf16, model::WeightFormat::kDense},
          Format{model::Precision::kF32, model::WeightFormat::kInt8},
          Format{model::Precision::kF32, model::WeightFormat::kQ4_0},
          Format{model::Precision::kF32, model::WeightFormat::kQ4_K},
          Format{model::Precision::kF32, model::WeightFormat::kDense, kernels::KvDtype::kQ8_0}}) {
      SCOPED_TRACE(file + " " + std::string(enum_name(f.precision)) + " weights " +
                   std::string(enum_name(f.weights)) + " KV cache " + std::string(enum_name(f.kv)));
      const ServingWorkload w{.context = config.max_seq,
                              .prompt_tokens = config.max_seq / 2,
                              .precision = f.precision,
                              .weights = f.weights,
                              .kv_dtype = f.kv};
      serve::ServedModel served;
      served.model = std::make_unique<model::Transformer>(
          config, model::inference_max_batch(config, w.max_step_tokens), config.max_seq, false,
          model::ModelOptions{.precision = f.precision, .weights = f.weights});
      served.tokenizer = tokenizer::load_tokenizer("byte");
      served.kv_dtype = f.kv;
      serve::ServeMetrics metrics;
      const serve::Engine engine(served, {}, metrics);
      const ServingMemory planned = serving_memory(config, 1, 1, 0, w, num_threads(), 0);
      expect_within_2_percent(planned.weights, double(served.model->resident_parameter_bytes()),
                              "weights");
      expect_within_2_percent(planned.activations, double(served.model->activation_bytes_total()),
                              "activations");
      const serve::PagedKvCache& cache = engine.cache();
      expect_within_2_percent(
          planned.kv_per_token * double(cache.blocks_total() * cache.block_tokens()),
          double(cache.bytes()), "KV cache");
    }
  }
}

TEST(ServingPlan, Llama3_70bFitsH100AndTpuV5eWithinTheirMemoryAndBandwidth) {
  const model::ModelConfig config = shipped_model("llama-3-70b.toml");
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  const ServingWorkload w{.context = 8192, .prompt_tokens = 4096};
  for (const std::string name : {"h100", "tpu-v5e"}) {
    SCOPED_TRACE(name);
    const Accelerator& a = catalog.find(name);
    const ServingSearch found = search_serving(config, a, 0, w);
    ASSERT_FALSE(found.ranked.empty());
    for (const ServingEstimate& e : found.ranked) {
      SCOPED_TRACE(e.layout());
      EXPECT_GE(e.sequences, 1);
      EXPECT_GE(e.batch, 1);
      EXPECT_LE(e.batch, std::min(e.sequences, w.max_running));
      EXPECT_DOUBLE_EQ(e.memory.usable, kUsableHbm * a.hbm_bytes);
      EXPECT_GE(double(e.sequences) * 8192 * e.memory.kv_per_token, 0);
      EXPECT_LE(double(e.sequences) * 8192 * e.memory.kv_per_token, e.memory.kv());
      // No decode runs faster than its chips can read their bf16 weights once per step.
      const double weights_read = 2 * 70.5e9 / double(e.tp * e.pp);
      EXPECT_GE(e.itl_s / double(e.pp), weights_read / a.hbm_bandwidth);
      EXPECT_TRUE(e.usd_per_million_on_demand.has_value());
    }
  }
  // Eight H100s, tensor-parallel: each holds an eighth of the f32 parameters and their bf16 copy,
  // and caches one of the eight kv heads: 80 layers x 128 x (key, value) x 4 bytes per token.
  const ServingEstimate tp8 = estimate_serving(config, catalog.find("h100"), 8, 1, 1, w);
  ASSERT_TRUE(tp8.invalid.empty()) << tp8.invalid;
  EXPECT_NEAR(tp8.memory.weights, 6 * 70.55e9 / 8, 0.02 * 6 * 70.55e9 / 8);
  EXPECT_DOUBLE_EQ(tp8.memory.kv_per_token, 80 * 128 * 2 * 4);
}

// A chip multiplies by its own slices: at tp = 8 each step reads an eighth of the matrices.
TEST(ServingPlan, EachChipReadsItsOwnSlices) {
  const model::ModelConfig config = shipped_model("llama-3-70b.toml");
  const auto reads = [&](const model::Sharding& sharding) {
    return model::matmul_weight_reads(model::model_layout(config, sharding),
                                      model::Precision::kBf16, model::WeightFormat::kDense)
        .per_token();
  };
  const double whole = reads({});
  EXPECT_NEAR(whole, 2 * 70.55e9, 0.02 * 2 * 70.55e9);
  EXPECT_NEAR(8 * reads({.tp = 8}), whole, 0.02 * whole);
  EXPECT_NEAR(2 * reads({.tp = 8, .block_begin = 0, .block_end = 40}), reads({.tp = 8}),
              0.02 * whole / 8);
}

TEST(ServingPlan, BoundsThatNoLayoutMeetsSayWhy) {
  const model::ModelConfig config = shipped_model("llama-3-70b.toml");
  const HardwareCatalog catalog = HardwareCatalog::builtin();
  const Accelerator& h100 = catalog.find("h100");
  ServingWorkload w{.context = 8192, .prompt_tokens = 4096, .ttft_bound_s = 1e-3};
  const ServingSearch found = search_serving(config, h100, 8, w);
  EXPECT_TRUE(found.ranked.empty());
  ASSERT_TRUE(found.best_misfit.has_value());
  EXPECT_NE(found.best_misfit->invalid.find("--ttft-ms"), std::string::npos)
      << found.best_misfit->invalid;
  // One chip cannot hold 70B parameters at six bytes each.
  w.ttft_bound_s = 0;
  const ServingEstimate one = estimate_serving(config, h100, 1, 1, 1, w);
  EXPECT_NE(one.invalid.find("does not fit"), std::string::npos) << one.invalid;
}

}  // namespace
}  // namespace tessera::plan
