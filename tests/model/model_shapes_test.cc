// The shipped configs describe the models they are named after: parameter counts as published.
#include <gtest/gtest.h>

#include <string>

#include "tessera/model/model_layout.h"
#include "tests/shipped_config.h"

namespace tessera::model {
namespace {

using testing::shipped_model;

TEST(ModelShapes, ParameterCountsMatchThePublishedModels) {
  // Hugging Face's model cards and safetensors indexes: GPT-2 124,439,808 (tied),
  // Llama-3.2-1B 1,235,814,400 (tied), Llama-3-8B 8,030,261,248.
  EXPECT_EQ(count_parameters(shipped_model("gpt2-124m.toml")).total, 124439808);
  EXPECT_EQ(count_parameters(shipped_model("llama-3.2-1b.toml")).total, 1235814400);
  EXPECT_EQ(count_parameters(shipped_model("llama-3-8b.toml")).total, 8030261248);
  // Llama-3-70B: 70,553,706,496.
  EXPECT_EQ(count_parameters(shipped_model("llama-3-70b.toml")).total, 70553706496);
}

TEST(ModelShapes, MixtureCountsActiveParameters) {
  const ModelConfig moe = shipped_model("moe-tiny.toml");
  const ParameterCount n = count_parameters(moe);
  const int64_t per_expert = 3 * moe.d_model * moe.ffn();
  EXPECT_EQ(n.total - n.active, moe.n_layer * (moe.moe.n_experts - moe.moe.top_k) * per_expert);
  const ModelConfig dense = shipped_model("llama-tiny.toml");
  EXPECT_EQ(count_parameters(dense).total, count_parameters(dense).active);
}

}  // namespace
}  // namespace tessera::model
