// PEFT adapter folders: what export_peft writes reads back as the same adapters; a module PEFT
// adapts beside fused ones it leaves alone gets zero adapters beside it; and what Tessera does not
// compute, or a folder that is not what it claims, is refused naming the key or tensor.
#include "tessera/interop/peft_adapter.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "tessera/core/json_file.h"
#include "tessera/interop/safetensors.h"
#include "tessera/model/model_layout.h"
#include "tests/expect_error.h"
#include "tests/interop/tensor_of.h"
#include "tests/model/small_configs.h"
#include "tests/test_dir.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;

model::ModelConfig adapted_llama() {
  model::ModelConfig c = model::small_configs(8).llama;
  c.lora.rank = 3;
  c.lora.alpha = 5;
  c.lora.targets = "qkv,mlp_out";
  c.lora.dropout = 0.05;
  return c;
}

std::vector<float> random_params(const model::ModelConfig& c) {
  std::vector<float> p(size_t(model::model_layout(c).params.total()));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& v : p) v = normal(rng);
  return p;
}

void rewrite_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& change) {
  nlohmann::json c = read_json_file(dir / kPeftConfigFile);
  change(c);
  std::ofstream(dir / kPeftConfigFile) << c.dump();
}

TEST(PeftAdapter, ReadsBackWhatItWrites) {
  const fs::path dir = testing::fresh_test_dir("tessera-peft");
  const model::ModelConfig c = adapted_llama();
  const std::vector<float> params = random_params(c);
  export_peft(c, params, dir, "base");
  model::ModelConfig base = c;
  base.lora = {};
  const PeftImport back = import_peft(dir, base);
  EXPECT_EQ(back.config.lora.rank, 3);
  EXPECT_EQ(back.config.lora.alpha, 5);
  EXPECT_EQ(back.config.lora.targets, "qkv,mlp_out");
  EXPECT_EQ(back.config.lora.dropout, 0.05);
  const model::ModelLayout layout = model::model_layout(c);
  ASSERT_EQ(int64_t(back.adapters.size()), layout.params.total() - layout.adapters_begin);
  for (const model::ParamInfo& p : layout.params.entries()) {
    if (p.offset < layout.adapters_begin) continue;
    const int64_t at = p.offset - layout.adapters_begin;
    for (int64_t i = 0; i < p.shape.numel(); ++i) {
      ASSERT_EQ(back.adapters[at + i], params[p.offset + i]) << p.name << "[" << i << "]";
    }
  }
}

// A Mixtral's experts: each expert's w1, w3 and w2 its own PEFT adapter, targeted by last name.
TEST(PeftAdapter, EachExpertIsAModuleOfItsOwn) {
  const fs::path dir = testing::fresh_test_dir("tessera-peft-moe");
  model::ModelConfig c = model::small_configs(8).moe;
  c.lora = {.rank = 2, .alpha = 4, .targets = "experts"};
  const std::vector<float> params = random_params(c);
  export_peft(c, params, dir, "base");
  const nlohmann::json config = read_json_file(dir / kPeftConfigFile);
  EXPECT_EQ(config["target_modules"], nlohmann::json({"w1", "w2", "w3"}));
  const SafetensorsFile file(dir / kPeftWeightsFile);
  const SafetensorsEntry* w3 =
      file.find("base_model.model.model.layers.1.block_sparse_moe.experts.2.w3.lora_B.weight");
  ASSERT_NE(w3, nullptr);
  EXPECT_EQ(w3->shape, (std::vector<int64_t>{c.ffn(), 2}));
  model::ModelConfig base = c;
  base.lora = {};
  const PeftImport back = import_peft(dir, base);
  EXPECT_EQ(back.config.lora.targets, "experts_in,experts_out");
  const model::ModelLayout layout = model::model_layout(c);
  EXPECT_EQ(back.adapters,
            std::vector<float>(params.begin() + layout.adapters_begin, params.end()));
}

// PEFT adapting q_proj alone: Tessera's qkv adapter with zero k and v pieces.
TEST(PeftAdapter, APieceOfAFusedPartAloneGetsZeroNeighbours) {
  const fs::path dir = testing::fresh_test_dir("tessera-peft");
  model::ModelConfig base = model::small_configs(8).llama;
  std::vector<interop::SafetensorsTensor> tensors;
  const std::vector<float> a(2 * 16, 1.0f), b(16 * 2, 2.0f);
  for (int l = 0; l < 2; ++l) {
    const std::string name =
        "base_model.model.model.layers." + std::to_string(l) + ".self_attn.q_proj.lora_";
    tensors.push_back(testing::tensor_of(name + "A.weight", {2, 16}, a));
    tensors.push_back(testing::tensor_of(name + "B.weight", {16, 2}, b));
  }
  write_safetensors(dir / kPeftWeightsFile, tensors, DType::f32, {});
  std::ofstream(dir / kPeftConfigFile)
      << R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]})";
  const PeftImport back = import_peft(dir, base);
  EXPECT_EQ(back.config.lora.targets, "qkv");
  const model::ModelLayout layout = model::model_layout(back.config);
  const auto& a_info = layout.params.find("blocks.1.attn.qkv.lora_a.weight");
  const auto& b_info = layout.params.find("blocks.1.attn.qkv.lora_b.weight");
  const float* values = back.adapters.data() - layout.adapters_begin;
  EXPECT_EQ(values[a_info.offset], 1.0f);           // q's block of A
  EXPECT_EQ(values[a_info.offset + 2 * 16], 0.0f);  // k's
  EXPECT_EQ(values[b_info.offset], 2.0f);           // q's rows of B
  EXPECT_EQ(values[b_info.offset + 16 * 2], 0.0f);  // k's
}

TEST(PeftAdapter, WhatTesseraDoesNotComputeIsRefused) {
  const fs::path dir = testing::fresh_test_dir("tessera-peft");
  const model::ModelConfig c = adapted_llama();
  model::ModelConfig base = c;
  base.lora = {};
  export_peft(c, random_params(c), dir, "base");
  auto refused = [&](const std::function<void(nlohmann::json&)>& change,
                     std::initializer_list<std::string> parts) {
    export_peft(c, random_params(c), dir, "base");
    rewrite_config(dir, change);
    testing::expect_error([&] { import_peft(dir, base); }, parts);
  };
  refused([](nlohmann::json& j) { j["peft_type"] = "IA3"; }, {"peft_type"});
  refused([](nlohmann::json& j) { j["use_dora"] = true; }, {"use_dora"});
  refused([](nlohmann::json& j) { j["use_rslora"] = true; }, {"use_rslora"});
  refused([](nlohmann::json& j) { j["rank_pattern"] = {{"q_proj", 8}}; }, {"rank_pattern"});
  refused([](nlohmann::json& j) { j["bias"] = "all"; }, {"bias"});
  refused([](nlohmann::json& j) { j["target_modules"] = ".*proj"; }, {"target_modules"});
  refused([](nlohmann::json& j) { j["target_modules"] = {"lm_head"}; }, {"names no module"});
  refused([](nlohmann::json& j) { j["r"] = 5; }, {"has shape", "r = 5"});
  refused([](nlohmann::json& j) { j["r"] = -1; }, {"r must be"});
  refused([](nlohmann::json& j) { j.erase("lora_alpha"); }, {"lora_alpha"});
  refused([](nlohmann::json& j) { j["lora_dropout"] = 1; }, {"lora_dropout"});
  // A module the config does not name, but whose tensors the file holds.
  refused(
      [](nlohmann::json& j) {
        j["target_modules"] = {"q_proj", "k_proj", "v_proj"};
      },
      {"mlp.down_proj.lora_A.weight", "no LoRA matrix"});
  export_peft(c, random_params(c), dir, "base");
  std::ofstream(dir / kPeftConfigFile) << "{\"peft_type\": ";
  testing::expect_error([&] { import_peft(dir, base); }, {kPeftConfigFile});
}

}  // namespace
}  // namespace tessera::interop
