// The shipped configs describe the models they are named after: parameter counts as published.
#include <gtest/gtest.h>

#include <string>

#include "tessera/core/config.h"
#include "tessera/model/model_layout.h"
#include "tessera/train/run_config.h"

namespace tessera::model {
namespace {

ModelConfig shipped(const std::string& name) {
  Config config(train::run_config_schema());
  config.load_file(std::string(TESSERA_SOURCE_DIR) + "/configs/" + name);
  return train::run_config_from(config).model;
}

TEST(ModelShapes, ParameterCountsMatchThePublishedModels) {
  // Hugging Face's model cards and safetensors indexes: GPT-2 124,439,808 (tied),
  // Llama-3.2-1B 1,235,814,400 (tied), Llama-3-8B 8,030,261,248.
  EXPECT_EQ(count_parameters(shipped("gpt2-124m.toml")).total, 124439808);
  EXPECT_EQ(count_parameters(shipped("llama-3.2-1b.toml")).total, 1235814400);
  EXPECT_EQ(count_parameters(shipped("llama-3-8b.toml")).total, 8030261248);
}

TEST(ModelShapes, MixtureCountsActiveParameters) {
  const ModelConfig moe = shipped("moe-tiny.toml");
  const ParameterCount n = count_parameters(moe);
  const int64_t per_expert = 3 * moe.d_model * moe.ffn();
  EXPECT_EQ(n.total - n.active, moe.n_layer * (moe.moe.n_experts - moe.moe.top_k) * per_expert);
  const ModelConfig dense = shipped("llama-tiny.toml");
  EXPECT_EQ(count_parameters(dense).total, count_parameters(dense).active);
}

}  // namespace
}  // namespace tessera::model
