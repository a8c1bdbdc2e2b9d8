// Whole models on a CUDA device against the same models on the CPU: twenty training steps of GPT-2
// and Llama (grouped-query attention) through the training state the trainer uses give the CPU's
// losses, within 1e-4 in f32 and 2% in bf16, and greedy decoding, over whole prefixes and over a
// paged key/value cache in device memory, gives the CPU's tokens. Skipped visibly where no CUDA
// device is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <vector>

#include "tessera/comm/mesh.h"
#include "tessera/comm/single_communicator.h"
#include "tessera/core/rng.h"
#include "tessera/kernels/device.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/decoder.h"
#include "tessera/runtime/train_step.h"
#include "tessera/train/train_state.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/model/small_configs.h"

namespace tessera::kernels {
namespace {

using cuda_testing::CudaTest;
using model::ModelConfig;
using model::Precision;

constexpr int64_t kBatch = 2, kSeq = 16, kSteps = 20;

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t stream) {
  CounterRng rng(42, stream);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t(rng.below(uint64_t(i), uint64_t(vocab)));
  return ids;
}

// The losses of kSteps AdamW steps on one fixed batch, run as the trainer runs a step.
std::vector<float> training_losses(const Context& ctx, const ModelConfig& config, Precision p) {
  train::TrainConfig tc;
  tc.precision = p;
  comm::SingleCommunicator alone;
  const comm::Mesh mesh(alone, {});
  train::TrainState state(ctx, config, tc, mesh, {}, int64_t{4} << 20);
  model::Transformer model(config, kBatch, kSeq, true,
                           {.context = &ctx, .precision = p, .store = &state.store()});
  state.init(1337);
  const std::vector<int32_t> x = random_ids(kBatch * kSeq, config.vocab_size, 1);
  const std::vector<int32_t> y = random_ids(kBatch * kSeq, config.vocab_size, 2);
  std::vector<float> losses;
  for (int64_t s = 0; s < kSteps; ++s) {
    state.zero_grad();
    state.begin_micro_step(true);
    losses.push_back(
        runtime::TrainStep(model).forward_backward(x.data(), y.data(), kBatch, kSeq, 1.0f));
    state.reduce_gradients();
    state.update(3e-3, 1.0f);
  }
  return losses;
}

struct Case {
  const char* name;
  ModelConfig config;
  Precision precision;
  double tolerance;  // relative, per step
};

std::vector<Case> training_cases() {
  const model::SmallConfigs small = model::small_configs(kSeq);
  return {{"gpt2-f32", small.gpt2, Precision::kF32, 1e-4},
          {"llama-f32", small.llama, Precision::kF32, 1e-4},
          {"gpt2-bf16", small.gpt2, Precision::kBf16, 2e-2},
          {"llama-bf16", small.llama, Precision::kBf16, 2e-2}};
}

class CudaModelTraining : public CudaTest, public ::testing::WithParamInterface<Case> {};

TEST_P(CudaModelTraining, TwentyStepsFollowTheCpuLosses) {
  const Case& c = GetParam();
  const std::vector<float> cpu = training_losses(kCpuContext, c.config, c.precision);
  const std::vector<float> cuda = training_losses(gpu(), c.config, c.precision);
  ASSERT_EQ(cpu.size(), cuda.size());
  EXPECT_LT(cpu.back(), cpu.front()) << "the CPU run itself does not learn";
  for (size_t s = 0; s < cpu.size(); ++s) {
    EXPECT_NEAR(cuda[s], cpu[s], c.tolerance * std::fabs(cpu[s]))
        << c.name << " step " << s + 1 << ": cpu " << cpu[s] << ", cuda " << cuda[s];
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaModelTraining, ::testing::ValuesIn(training_cases()),
                         [](const auto& info) {
                           std::string name = info.param.name;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// An inference model with the parameters every model of this config gets from seed 7.
std::unique_ptr<model::Transformer> inference_model(const Context& ctx, const ModelConfig& config) {
  auto m = std::make_unique<model::Transformer>(config, 1, config.max_seq, false,
                                                model::ModelOptions{.context = &ctx});
  m->init_weights(7);
  return m;
}

int32_t argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// 12 greedy tokens after a prompt, each from the whole prefix's next-token logits.
std::vector<int32_t> greedy(const Context& ctx, model::Transformer& m,
                            std::vector<int32_t> tokens) {
  const int64_t V = m.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  for (int i = 0; i < 12; ++i) {
    const float* next = m.next_token_logits(tokens.data(), int64_t(tokens.size()));
    copy_to_host(ctx, logits.data(), next, sizeof(float) * size_t(V));
    tokens.push_back(argmax(logits));
  }
  return tokens;
}

TEST_F(CudaTest, GreedyDecodingGivesTheCpuTokens) {
  const model::SmallConfigs small = model::small_configs(32);
  for (const ModelConfig& config : {small.gpt2, small.llama}) {
    const auto cpu_model = inference_model(kCpuContext, config);
    const auto cuda_model = inference_model(gpu(), config);
    const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
    EXPECT_EQ(greedy(gpu(), *cuda_model, prompt), greedy(kCpuContext, *cpu_model, prompt))
        << enum_name(config.arch);
  }
}

// Keys and values of every layer in one pool of blocks on ctx's device, sequence s of S owning
// blocks s, s + S, ...
class PagedPool {
 public:
  PagedPool(const Context& ctx, const ModelConfig& c, int64_t block_tokens)
      : block_tokens_(block_tokens) {
    const int64_t blocks = (c.max_seq + block_tokens - 1) / block_tokens;
    const int64_t layer_floats = blocks * block_tokens * c.kv_heads() * c.head_dim();
    storage_ = DeviceArray<float>(ctx, 2 * c.n_layer * layer_floats);
    for (int64_t l = 0; l < c.n_layer; ++l) {
      k_.push_back(storage_.data() + 2 * l * layer_floats);
      v_.push_back(storage_.data() + (2 * l + 1) * layer_floats);
    }
    for (int64_t b = blocks - 1; b >= 0; --b) table_.push_back(int32_t(b));  // out of order
  }
  runtime::KvCacheView view() const { return {k_, v_, block_tokens_}; }
  std::span<const int32_t> table() const { return table_; }

 private:
  int64_t block_tokens_;
  DeviceArray<float> storage_;
  std::vector<void*> k_, v_;
  std::vector<int32_t> table_;
};

// A prompt as one chunk, then one token at a time, each the argmax of the last logits.
std::vector<int32_t> paged_greedy(const Context& ctx, model::Transformer& m,
                                  std::vector<int32_t> tokens) {
  PagedPool pool(ctx, m.config(), 4);
  const int64_t V = m.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V));
  runtime::Decoder decoder(m);
  int64_t cached = 0;
  for (int i = 0; i < 12; ++i) {
    const runtime::DecodeChunk chunk{tokens.data() + cached, int64_t(tokens.size()) - cached,
                                     cached, pool.table()};
    const float* next = decoder.decode(pool.view(), {&chunk, 1});
    cached = int64_t(tokens.size());
    copy_to_host(ctx, logits.data(), next, sizeof(float) * size_t(V));
    tokens.push_back(argmax(logits));
  }
  return tokens;
}

TEST_F(CudaTest, PagedDecodingInDeviceMemoryGivesTheCpuTokens) {
  const model::SmallConfigs small = model::small_configs(32);
  for (const ModelConfig& config : {small.gpt2, small.llama}) {
    const auto cpu_model = inference_model(kCpuContext, config);
    const auto cuda_model = inference_model(gpu(), config);
    const std::vector<int32_t> prompt = {2, 7, 1, 8, 2, 8};
    EXPECT_EQ(paged_greedy(gpu(), *cuda_model, prompt),
              paged_greedy(kCpuContext, *cpu_model, prompt))
        << enum_name(config.arch);
  }
}

}  // namespace
}  // namespace tessera::kernels
