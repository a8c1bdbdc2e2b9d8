// The Hugging Face name mapping against model_layout for GPT-2, Llama (GQA and MQA, tied and
// untied) and Mixtral configs, config.json in both directions, and export/import through real
// files, including every way an imported folder can be wrong.
#include "tessera/interop/hf_names.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <set>

#include "tessera/interop/hf_convert.h"
#include "tessera/interop/safetensors.h"
#include "tests/expect_error.h"
#include "tests/test_dir.h"

namespace tessera::interop {
namespace {

namespace fs = std::filesystem;
using model::Architecture;
using model::ModelConfig;
using nlohmann::json;
using testing::expect_error;

ModelConfig gpt2() {
  ModelConfig c;
  c.vocab_size = 40;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.max_seq = 8;
  return c;
}

ModelConfig llama(int64_t kv_heads, bool tied) {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.vocab_size = 40;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = kv_heads;
  c.d_model = 16;
  c.ffn_hidden = 24;
  c.max_seq = 8;
  c.rope_theta = 5e5;
  c.norm_eps = 1e-6;
  c.tie_embeddings = tied;
  return c;
}

ModelConfig mixtral() {
  ModelConfig c = llama(2, false);
  c.ffn_hidden = 8;
  c.moe.n_experts = 4;
  c.moe.top_k = 2;
  c.moe.aux_loss_coef = 0.02;
  return c;
}

struct Case {
  const char* name;
  ModelConfig config;
  const char* architecture;
};

std::vector<Case> cases() {
  return {{"Gpt2", gpt2(), "GPT2LMHeadModel"},
          {"Gpt2Untied",
           [] {
             ModelConfig c = gpt2();
             c.tie_embeddings = false;
             return c;
           }(),
           "GPT2LMHeadModel"},
          {"LlamaGqaUntied", llama(2, false), "LlamaForCausalLM"},
          {"LlamaMqaTied", llama(1, true), "LlamaForCausalLM"},
          {"LlamaMhaTiedDefaultFfn",
           [] {
             ModelConfig c = llama(0, true);
             c.ffn_hidden = 0;
             return c;
           }(),
           "LlamaForCausalLM"},
          {"Mixtral", mixtral(), "MixtralForCausalLM"},
          {"Qwen3QkNorm",
           [] {
             ModelConfig c = llama(2, false);
             c.qk_norm = true;
             return c;
           }(),
           "Qwen3ForCausalLM"}};
}

TEST(HfNames, QkNormGainsAreQwen3sPerHeadNorms) {
  ModelConfig c = llama(2, false);  // 4 heads of 4 channels
  c.qk_norm = true;
  const HfLayout hf = hf_layout(c);
  int found = 0;
  for (const HfTensor& t : hf.tensors) {
    if (t.hf_name == "model.layers.1.self_attn.q_norm.weight" ||
        t.hf_name == "model.layers.1.self_attn.k_norm.weight") {
      EXPECT_EQ(t.hf_shape, std::vector<int64_t>{4}) << t.hf_name;
      ++found;
    }
  }
  EXPECT_EQ(found, 2);
  const nlohmann::json j = hf_config_json(c, DType::f32);
  EXPECT_EQ(j.at("model_type"), "qwen3");
  EXPECT_EQ(j.at("head_dim"), 4);
  c.moe.n_experts = 4;
  expect_error([&] { hf_layout(c); }, {"model.qk_norm", "Mixtral"});
}

class HfMapping : public ::testing::TestWithParam<Case> {};

INSTANTIATE_TEST_SUITE_P(Configs, HfMapping, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_P(HfMapping, EveryParameterValueMapsToExactlyOneHfValue) {
  const ModelConfig& c = GetParam().config;
  const model::ModelLayout layout = model::model_layout(c);
  const HfLayout hf = hf_layout(c);
  EXPECT_EQ(hf.architecture, GetParam().architecture);
  std::vector<int> covered(size_t(layout.params.total()), 0);
  std::set<std::string> names, params;
  for (const HfTensor& t : hf.tensors) {
    EXPECT_TRUE(names.insert(t.hf_name).second) << t.hf_name;
    params.insert(t.param);
    const HfSlice s = hf_slice(layout, t);
    int64_t numel = 1;
    for (int64_t d : t.hf_shape) numel *= d;
    EXPECT_EQ(numel, t.rows * s.width) << t.hf_name;
    if (t.transposed) {
      EXPECT_EQ(t.hf_shape, (std::vector<int64_t>{s.width, t.rows})) << t.hf_name;
    } else if (t.hf_shape.size() == 2) {
      EXPECT_EQ(t.hf_shape, (std::vector<int64_t>{t.rows, s.width})) << t.hf_name;
    }
    for (int64_t i = 0; i < numel; ++i) ++covered[size_t(s.offset + i)];
  }
  std::vector<int> expected(covered.size(), 0);
  for (const model::ParamInfo& p : layout.params.entries()) {
    EXPECT_TRUE(params.count(p.name)) << p.name << " has no Hugging Face tensor";
    for (int64_t i = 0; i < p.shape.numel(); ++i) expected[size_t(p.offset + i)] = 1;
  }
  EXPECT_EQ(covered, expected);
  EXPECT_EQ(hf.tied_head.empty(), !c.tie_embeddings);
  if (c.tie_embeddings) {
    EXPECT_FALSE(names.count(hf.tied_head));
  }
}

TEST_P(HfMapping, ConfigJsonRoundTrips) {
  const ModelConfig& c = GetParam().config;
  const json j = hf_config_json(c, DType::bf16);
  EXPECT_EQ(j["architectures"], json::array({GetParam().architecture}));
  EXPECT_EQ(j["torch_dtype"], "bfloat16");
  const ModelConfig back = model_config_from_hf(j, "config.json");
  EXPECT_EQ(back.arch, c.arch);
  EXPECT_EQ(back.vocab_size, c.vocab_size);
  EXPECT_EQ(back.n_layer, c.n_layer);
  EXPECT_EQ(back.n_head, c.n_head);
  EXPECT_EQ(back.kv_heads(), c.kv_heads());
  EXPECT_EQ(back.d_model, c.d_model);
  EXPECT_EQ(back.max_seq, c.max_seq);
  EXPECT_EQ(back.ffn(), c.ffn());
  EXPECT_EQ(back.tie_embeddings, c.tie_embeddings);
  EXPECT_EQ(back.qk_norm, c.qk_norm);
  EXPECT_EQ(back.moe.n_experts, c.moe.n_experts);
  if (c.arch == Architecture::kLlama) {
    EXPECT_EQ(back.rope_theta, c.rope_theta);
    EXPECT_EQ(back.norm_eps, c.norm_eps);
  }
  if (c.is_moe()) {
    EXPECT_EQ(back.moe.top_k, c.moe.top_k);
    EXPECT_EQ(back.moe.aux_loss_coef, c.moe.aux_loss_coef);
    EXPECT_EQ(back.moe.capacity_factor, 0.0);
  }
  EXPECT_EQ(model::model_layout(back).params.total(), model::model_layout(c).params.total());
}

TEST(HfNames, Gpt2FollowsTransformersNamesAndConv1DLayout) {
  const HfLayout hf = hf_layout(gpt2());
  auto find = [&](const std::string& name) -> const HfTensor& {
    for (const HfTensor& t : hf.tensors) {
      if (t.hf_name == name) return t;
    }
    throw std::runtime_error("no " + name);
  };
  EXPECT_EQ(hf.tensors.front().hf_name, "transformer.wte.weight");
  const HfTensor& qkv = find("transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(qkv.param, "blocks.1.attn.qkv.weight");
  EXPECT_TRUE(qkv.transposed);
  EXPECT_EQ(qkv.hf_shape, (std::vector<int64_t>{16, 48}));
  EXPECT_EQ(find("transformer.h.0.mlp.c_fc.weight").hf_shape, (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(find("transformer.h.0.mlp.c_proj.weight").hf_shape, (std::vector<int64_t>{64, 16}));
  EXPECT_EQ(find("transformer.h.0.attn.c_attn.bias").hf_shape, (std::vector<int64_t>{48}));
  EXPECT_FALSE(find("transformer.h.0.attn.c_attn.bias").transposed);
  EXPECT_EQ(find("transformer.ln_f.bias").param, "lnf.bias");
  EXPECT_EQ(find("transformer.wpe.weight").hf_shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(hf.tied_head, "lm_head.weight");
  EXPECT_EQ(hf.tied_to, "transformer.wte.weight");
  EXPECT_TRUE(is_hf_buffer(Architecture::kGpt2, "h.3.attn.bias"));
  EXPECT_TRUE(is_hf_buffer(Architecture::kGpt2, "transformer.h.0.attn.masked_bias"));
  EXPECT_FALSE(is_hf_buffer(Architecture::kGpt2, "transformer.h.0.attn.c_attn.bias"));
}

TEST(HfNames, LlamaSplitsFusedQkvAndGateUpByRows) {
  const ModelConfig c = llama(2, false);  // 4 query heads and 2 kv heads of 4 channels
  const HfLayout hf = hf_layout(c);
  std::map<std::string, HfTensor> by_name;
  for (const HfTensor& t : hf.tensors) by_name[t.hf_name] = t;
  const HfTensor& q = by_name.at("model.layers.1.self_attn.q_proj.weight");
  const HfTensor& k = by_name.at("model.layers.1.self_attn.k_proj.weight");
  const HfTensor& v = by_name.at("model.layers.1.self_attn.v_proj.weight");
  EXPECT_EQ(q.param, "blocks.1.attn.qkv.weight");
  EXPECT_EQ(std::tie(q.row_begin, q.rows), std::make_tuple(int64_t{0}, int64_t{16}));
  EXPECT_EQ(std::tie(k.row_begin, k.rows), std::make_tuple(int64_t{16}, int64_t{8}));
  EXPECT_EQ(std::tie(v.row_begin, v.rows), std::make_tuple(int64_t{24}, int64_t{8}));
  EXPECT_EQ(k.hf_shape, (std::vector<int64_t>{8, 16}));
  const HfTensor& up = by_name.at("model.layers.0.mlp.up_proj.weight");
  EXPECT_EQ(up.param, "blocks.0.mlp.gate_up.weight");
  EXPECT_EQ(std::tie(up.row_begin, up.rows), std::make_tuple(int64_t{24}, int64_t{24}));
  EXPECT_EQ(by_name.at("model.layers.0.mlp.down_proj.weight").hf_shape,
            (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(by_name.at("lm_head.weight").param, "lm_head.weight");
  EXPECT_EQ(by_name.at("model.norm.weight").param, "lnf.weight");
  EXPECT_TRUE(hf.tied_head.empty());
  EXPECT_TRUE(is_hf_buffer(Architecture::kLlama, "model.layers.0.self_attn.rotary_emb.inv_freq"));

  const HfLayout tied = hf_layout(llama(1, true));
  EXPECT_EQ(tied.tied_head, "lm_head.weight");
  EXPECT_EQ(tied.tied_to, "model.embed_tokens.weight");
}

TEST(HfNames, MixtralExpertsAreRowsOfTheStackedExperts) {
  const HfLayout hf = hf_layout(mixtral());  // 4 experts, F = 8, C = 16
  std::map<std::string, HfTensor> by_name;
  for (const HfTensor& t : hf.tensors) by_name[t.hf_name] = t;
  const std::string e3 = "model.layers.1.block_sparse_moe.experts.3.";
  const HfTensor& w1 = by_name.at(e3 + "w1.weight");
  const HfTensor& w3 = by_name.at(e3 + "w3.weight");
  const HfTensor& w2 = by_name.at(e3 + "w2.weight");
  EXPECT_EQ(w1.param, "blocks.1.moe.experts.gate_up.weight");
  EXPECT_EQ(std::tie(w1.row_begin, w1.rows), std::make_tuple(int64_t{48}, int64_t{8}));
  EXPECT_EQ(std::tie(w3.row_begin, w3.rows), std::make_tuple(int64_t{56}, int64_t{8}));
  EXPECT_EQ(w2.param, "blocks.1.moe.experts.down.weight");
  EXPECT_EQ(std::tie(w2.row_begin, w2.rows), std::make_tuple(int64_t{48}, int64_t{16}));
  EXPECT_EQ(w2.hf_shape, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(by_name.at("model.layers.0.block_sparse_moe.gate.weight").hf_shape,
            (std::vector<int64_t>{4, 16}));
  EXPECT_FALSE(by_name.count("model.layers.0.mlp.gate_proj.weight"));
}

TEST(HfNames, SharedExpertsCannotBeExported) {
  ModelConfig c = mixtral();
  c.moe.n_shared = 1;
  expect_error([&] { hf_layout(c); }, {"model.moe_shared_experts = 1", "Mixtral"});
}

TEST(HfConfig, FillsTransformersDefaults) {
  const ModelConfig g = model_config_from_hf({{"model_type", "gpt2"},
                                              {"vocab_size", 50},
                                              {"n_embd", 8},
                                              {"n_layer", 1},
                                              {"n_head", 2},
                                              {"n_positions", 16},
                                              {"n_inner", nullptr}},
                                             "config.json");
  EXPECT_EQ(g.arch, Architecture::kGpt2);
  EXPECT_EQ(g.ffn(), 32);
  const ModelConfig l = model_config_from_hf({{"architectures", {"LlamaForCausalLM"}},
                                              {"vocab_size", 50},
                                              {"hidden_size", 8},
                                              {"num_hidden_layers", 1},
                                              {"num_attention_heads", 2},
                                              {"intermediate_size", 12},
                                              {"max_position_embeddings", 16}},
                                             "config.json");
  EXPECT_EQ(l.arch, Architecture::kLlama);
  EXPECT_EQ(l.kv_heads(), 2);
  EXPECT_EQ(l.norm_eps, 1e-6);
  EXPECT_EQ(l.rope_theta, 1e4);
  EXPECT_FALSE(l.tie_embeddings);
  const ModelConfig m = model_config_from_hf({{"model_type", "mixtral"},
                                              {"vocab_size", 50},
                                              {"hidden_size", 8},
                                              {"num_hidden_layers", 1},
                                              {"num_attention_heads", 2},
                                              {"intermediate_size", 12},
                                              {"max_position_embeddings", 16},
                                              {"sliding_window", 16}},
                                             "config.json");
  EXPECT_EQ(m.moe.n_experts, 8);
  EXPECT_EQ(m.moe.top_k, 2);
}

// Llama 3.1's rope_scaling, as its config.json states it, and the older linear "type" key: read
// into model.rope_scaling and written back as Transformers reads them.
TEST(HfConfig, RopeScalingRoundTrips) {
  json j = hf_config_json(llama(2, false), DType::f32);
  EXPECT_TRUE(j.at("rope_scaling").is_null());
  j["rope_scaling"] = {{"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192},
                       {"rope_type", "llama3"}};
  const ModelConfig c = model_config_from_hf(j, "config.json");
  EXPECT_EQ(c.rope_scaling,
            (kernels::RopeScaling{kernels::RopeScalingType::kLlama3, 8, 1, 4, 8192}));
  EXPECT_EQ(hf_config_json(c, DType::f32).at("rope_scaling"), j.at("rope_scaling"));
  EXPECT_EQ(model_config_from_hf(hf_config_json(c, DType::f32), "config.json"), c);

  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const ModelConfig linear = model_config_from_hf(j, "config.json");
  EXPECT_EQ(linear.rope_scaling.type, kernels::RopeScalingType::kLinear);
  EXPECT_EQ(linear.rope_scaling.factor, 2.0);
  EXPECT_EQ(hf_config_json(linear, DType::f32).at("rope_scaling"),
            (json{{"rope_type", "linear"}, {"factor", 2.0}}));
  // Qwen 3's YaRN: the original context given, the betas and the attention factor defaulted.
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  const ModelConfig yarn = model_config_from_hf(j, "config.json");
  EXPECT_EQ(yarn.rope_scaling,
            (kernels::RopeScaling{
                .type = kernels::RopeScalingType::kYarn, .factor = 4, .original_context = 32768}));
  EXPECT_EQ(model_config_from_hf(hf_config_json(yarn, DType::f32), "config.json"), yarn);
  // DeepSeek's mscale pair sets the attention factor.
  j["rope_scaling"] = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"mscale", 2.0}, {"mscale_all_dim", 1.0}};
  EXPECT_DOUBLE_EQ(model_config_from_hf(j, "config.json").rope_scaling.attention_factor,
                   (0.2 * std::log(4.0) + 1) / (0.1 * std::log(4.0) + 1));
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(model_config_from_hf(j, "config.json").rope_scaling.type,
            kernels::RopeScalingType::kNone);
}

TEST(HfConfig, RejectsWhatTesseraComputesDifferently) {
  const json base_llama = hf_config_json(llama(2, false), DType::f32);
  const json base_gpt2 = hf_config_json(gpt2(), DType::f32);
  auto with = [](json j, const std::string& key, const json& value) {
    if (value.is_null()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
    return j;
  };
  auto expect_bad = [](const json& j, std::initializer_list<std::string> parts) {
    expect_error([&] { model_config_from_hf(j, "hf/config.json"); }, parts);
  };
  expect_bad(with(base_llama, "model_type", "mistral"), {"hf/config.json", "'mistral'"});
  expect_bad(with(with(base_llama, "model_type", nullptr), "architectures", {"BertModel"}),
             {"'BertModel'"});
  expect_bad(with(base_llama, "hidden_size", nullptr), {"hf/config.json", "missing 'hidden_size'"});
  expect_bad(with(base_llama, "hidden_size", "16"), {"'hidden_size'", "integer"});
  expect_bad(with(base_llama, "num_attention_heads", 0), {"'num_attention_heads'", ">= 1"});
  expect_bad(with(base_llama, "hidden_act", "gelu"), {"'hidden_act'", "gelu"});
  expect_bad(with(base_llama, "rope_scaling", {{"rope_type", "longrope"}, {"factor", 4.0}}),
             {"'rope_scaling'", "\"longrope\" is not supported"});
  expect_bad(with(base_llama, "rope_scaling",
                  {{"rope_type", "yarn"}, {"factor", 4.0}, {"beta_fast", 1.0}, {"beta_slow", 2.0}}),
             {"'rope_scaling'", "'beta_slow'"});
  expect_bad(with(base_llama, "rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}),
             {"'rope_scaling'", "'low_freq_factor'"});
  expect_bad(with(base_llama, "rope_scaling",
                  {{"rope_type", "llama3"},
                   {"factor", 8.0},
                   {"low_freq_factor", 1.0},
                   {"high_freq_factor", 4.0}}),
             {"'rope_scaling'", "missing 'original_max_position_embeddings'"});
  expect_bad(with(base_llama, "rope_scaling", {{"type", "linear"}, {"factor", 0.5}}),
             {"'rope_scaling'", "'factor'"});
  expect_bad(with(base_llama, "rope_scaling", "llama3"), {"'rope_scaling'", "JSON object"});
  expect_bad(with(base_llama, "attention_bias", true), {"'attention_bias'"});
  expect_bad(with(base_llama, "mlp_bias", true), {"'mlp_bias'"});
  expect_bad(with(base_llama, "head_dim", 8), {"'head_dim' = 8"});
  expect_bad(with(base_llama, "num_key_value_heads", 3), {"hf/config.json", "n_kv_head"});
  expect_bad(with(base_llama, "tie_word_embeddings", "no"), {"'tie_word_embeddings'"});
  expect_bad(with(base_llama, "rope_theta", "big"), {"'rope_theta'", "number"});
  expect_bad(with(base_gpt2, "activation_function", "relu"), {"'activation_function'", "relu"});
  expect_bad(with(base_gpt2, "layer_norm_epsilon", 1e-6), {"'layer_norm_epsilon'"});
  expect_bad(with(base_gpt2, "tie_word_embeddings", "no"), {"'tie_word_embeddings'"});
  expect_bad(with(base_gpt2, "scale_attn_by_inverse_layer_idx", true),
             {"'scale_attn_by_inverse_layer_idx'"});
  expect_bad(with(base_gpt2, "n_head", 3), {"hf/config.json", "divisible"});
  json moe = hf_config_json(mixtral(), DType::f32);
  expect_bad(with(moe, "sliding_window", 4), {"'sliding_window' = 4"});
  expect_bad(with(moe, "num_experts_per_tok", 5), {"hf/config.json", "moe_top_k"});
  expect_bad(json::array(), {"hf/config.json", "object"});
}

// Export and import through real folders.
class HfFolder : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::fresh_test_dir("tessera-hf"); }
  void TearDown() override { fs::remove_all(dir_); }

  // The flat buffer of the config's layout, random where parameters are and zero in padding.
  static std::vector<float> random_params(const ModelConfig& c, uint32_t seed) {
    const model::ModelLayout layout = model::model_layout(c);
    std::vector<float> params(size_t(layout.params.total()), 0.0f);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 0.5f);
    for (const model::ParamInfo& p : layout.params.entries()) {
      for (int64_t i = 0; i < p.shape.numel(); ++i) params[size_t(p.offset + i)] = normal(rng);
    }
    return params;
  }

  struct Stored {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> values;
  };

  static std::vector<Stored> read_tensors(const fs::path& path) {
    const SafetensorsFile file(path);
    std::vector<Stored> out;
    for (const SafetensorsEntry& e : file.header().tensors) {
      out.push_back({e.name, e.shape, std::vector<float>(size_t(e.numel()))});
      file.read_f32(e, out.back().values);
    }
    return out;
  }

  static void write_tensors(const fs::path& path, const std::vector<Stored>& tensors) {
    std::vector<SafetensorsTensor> list;
    for (const Stored& t : tensors) {
      list.push_back({t.name, t.shape, [&t](std::span<float> out) {
                        std::copy(t.values.begin(), t.values.end(), out.begin());
                      }});
    }
    write_safetensors(path, list, DType::f32, {{"format", "pt"}});
  }

  // Exports `c` with random weights into dir_/name, then lets `edit` change its tensors.
  fs::path exported(const ModelConfig& c, const std::string& name,
                    const std::function<void(std::vector<Stored>&)>& edit = nullptr) {
    const fs::path out = dir_ / name;
    export_hf(c, random_params(c, 7), out, DType::f32);
    if (edit) {
      std::vector<Stored> tensors = read_tensors(out / kHfWeightsFile);
      edit(tensors);
      write_tensors(out / kHfWeightsFile, tensors);
    }
    return out;
  }

  static Stored& named(std::vector<Stored>& tensors, const std::string& name) {
    for (Stored& t : tensors) {
      if (t.name == name) return t;
    }
    throw std::runtime_error("no tensor " + name);
  }

  fs::path dir_;
};

TEST_F(HfFolder, ExportThenImportIsBitExactForEveryArchitecture) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.name);
    const std::vector<float> params = random_params(k.config, 11);
    const fs::path out = dir_ / k.name;
    EXPECT_EQ(export_hf(k.config, params, out, DType::f32), k.architecture);
    EXPECT_TRUE(fs::exists(out / kHfConfigFile));
    const HfImport back = import_hf(out);
    EXPECT_EQ(back.architecture, k.architecture);
    ASSERT_EQ(back.params.size(), params.size());
    EXPECT_EQ(std::memcmp(back.params.data(), params.data(), params.size() * sizeof(float)), 0);
    EXPECT_EQ(back.config.ffn(), k.config.ffn());
  }
}

TEST_F(HfFolder, Gpt2ExportStoresConv1DWeightsTransposed) {
  const ModelConfig c = gpt2();
  const std::vector<float> params = random_params(c, 3);
  export_hf(c, params, dir_ / "g", DType::f32);
  const model::ModelLayout layout = model::model_layout(c);
  const model::ParamInfo& fc = layout.params.find("blocks.1.fc.weight");  // [64, 16]
  std::vector<Stored> stored = read_tensors(dir_ / "g" / kHfWeightsFile);
  const Stored& c_fc = named(stored, "transformer.h.1.mlp.c_fc.weight");  // [16, 64]
  ASSERT_EQ(c_fc.shape, (std::vector<int64_t>{16, 64}));
  for (int64_t out = 0; out < 64; ++out) {
    for (int64_t in = 0; in < 16; ++in) {
      ASSERT_EQ(c_fc.values[size_t(in * 64 + out)], params[size_t(fc.offset + out * 16 + in)]);
    }
  }
  EXPECT_FALSE(std::any_of(stored.begin(), stored.end(),
                           [](const Stored& t) { return t.name == "lm_head.weight"; }));
}

TEST_F(HfFolder, Bf16ExportImportsTheRoundedValues) {
  const ModelConfig c = llama(2, false);
  const std::vector<float> params = random_params(c, 5);
  export_hf(c, params, dir_ / "b", DType::bf16);
  EXPECT_EQ(SafetensorsFile(dir_ / "b" / kHfWeightsFile).header().tensors.front().dtype, "BF16");
  const HfImport back = import_hf(dir_ / "b");
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(back.params[i], bf16_to_f32(f32_to_bf16(params[i]))) << i;
  }
}

TEST_F(HfFolder, MissingTensorIsNamed) {
  const fs::path out = exported(gpt2(), "g", [](std::vector<Stored>& t) {
    std::erase_if(t, [](const Stored& s) { return s.name == "transformer.h.1.mlp.c_fc.bias"; });
  });
  expect_error(
      [&] { import_hf(out); },
      {"model.safetensors", "missing tensor 'transformer.h.1.mlp.c_fc.bias'", "blocks.1.fc.bias"});
}

TEST_F(HfFolder, UnexpectedTensorIsNamed) {
  const fs::path out = exported(llama(2, false), "l", [](std::vector<Stored>& t) {
    t.push_back({"model.layers.9.mlp.up_proj.weight", {2}, {1, 2}});
  });
  expect_error([&] { import_hf(out); },
               {"model.safetensors", "unexpected tensor 'model.layers.9.mlp.up_proj.weight'",
                "LlamaForCausalLM"});
}

TEST_F(HfFolder, ShapeMismatchIsNamed) {
  const fs::path out = exported(llama(2, false), "l", [](std::vector<Stored>& t) {
    Stored& k = named(t, "model.layers.0.self_attn.k_proj.weight");
    k.shape = {16, 8};  // transposed by mistake
  });
  expect_error([&] { import_hf(out); },
               {"'model.layers.0.self_attn.k_proj.weight'", "shape [16,8]", "implies [8,16]"});
}

TEST_F(HfFolder, TiedHeadIsAcceptedOnlyWhenEqualToTheEmbedding) {
  const ModelConfig c = llama(1, true);
  auto copy_embedding = [](std::vector<Stored>& t) {
    Stored head = named(t, "model.embed_tokens.weight");
    head.name = "lm_head.weight";
    t.push_back(head);
  };
  const fs::path same = exported(c, "same", copy_embedding);
  EXPECT_EQ(import_hf(same).params, random_params(c, 7));
  const fs::path differs = exported(c, "differs", [&](std::vector<Stored>& t) {
    copy_embedding(t);
    named(t, "lm_head.weight").values[3] += 1;
  });
  expect_error(
      [&] { import_hf(differs); },
      {"'lm_head.weight' differs from 'model.embed_tokens.weight'", "tie_word_embeddings"});
}

TEST_F(HfFolder, ReadsGpt2ModelNamesWithoutPrefixAndSkipsMaskBuffers) {
  const ModelConfig c = gpt2();
  const fs::path out = exported(c, "hub", [](std::vector<Stored>& t) {
    for (Stored& s : t) s.name = s.name.substr(std::string("transformer.").size());
    t.push_back({"h.0.attn.bias", {1, 1, 8, 8}, std::vector<float>(64, 1.0f)});
    t.push_back({"h.1.attn.bias", {1, 1, 8, 8}, std::vector<float>(64, 1.0f)});
  });
  EXPECT_EQ(import_hf(out).params, random_params(c, 7));
}

TEST_F(HfFolder, ReadsShardedCheckpointsThroughTheIndex) {
  const ModelConfig c = llama(2, true);
  const fs::path out = exported(c, "sharded");
  std::vector<Stored> all = read_tensors(out / kHfWeightsFile);
  fs::remove(out / kHfWeightsFile);
  const size_t half = all.size() / 2;
  write_tensors(out / "model-00001-of-00002.safetensors", {all.begin(), all.begin() + half});
  write_tensors(out / "model-00002-of-00002.safetensors", {all.begin() + half, all.end()});
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  for (size_t i = 0; i < all.size(); ++i) {
    index["weight_map"][all[i].name] =
        i < half ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  std::ofstream(out / kHfIndexFile) << index.dump();
  EXPECT_EQ(import_hf(out).params, random_params(c, 7));

  index["weight_map"][all[0].name] = "model-00002-of-00002.safetensors";
  std::ofstream(out / kHfIndexFile, std::ios::trunc) << index.dump();
  expect_error([&] { import_hf(out); }, {kHfIndexFile, all[0].name, "does not hold it"});
  index["weight_map"][all[0].name] = "../elsewhere.safetensors";
  std::ofstream(out / kHfIndexFile, std::ios::trunc) << index.dump();
  expect_error([&] { import_hf(out); }, {kHfIndexFile, "plain file name"});
}

TEST_F(HfFolder, MissingFilesAreNamed) {
  expect_error([&] { import_hf(dir_ / "nowhere"); }, {"config.json", "cannot open"});
  const fs::path out = exported(gpt2(), "g");
  fs::remove(out / kHfWeightsFile);
  expect_error([&] { import_hf(out); }, {"neither model.safetensors nor"});
  std::ofstream(out / kHfConfigFile, std::ios::trunc) << "{not json";
  expect_error([&] { import_hf(out); }, {"config.json", "not valid JSON"});
}

}  // namespace
}  // namespace tessera::interop
