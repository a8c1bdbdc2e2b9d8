// Loads the PyTorch reference fixtures written by tests/reference/*_reference.py: fixture.json
// (config, B, T, loss, aux_loss, tensor index) and fixture.bin (parameters under Tessera's names,
// gradients under "grad/<name>", inputs and targets as int32).
//
// Set TESSERA_REFERENCE_FIXTURE=DIR to use a fixture the script already wrote (for the GPT-2
// script; Llama cases are named by the script's --config); otherwise the script runs into a
// temporary directory that is deleted when the process exits. The scripts need Debian's
// python3-torch, run as /usr/bin/python3.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/model/model_config.h"
#include "tessera/model/parameters.h"
#include "tessera/model/transformer.h"

namespace tessera::model::reference {

namespace fs = std::filesystem;

struct FixtureTensor {
  std::vector<int64_t> shape;
  std::string dtype;
  std::vector<float> f32;
  std::vector<int32_t> i32;
};

struct Fixture {
  ModelConfig config;
  int64_t B = 0, T = 0;
  double loss = 0, aux_loss = 0;
  std::map<std::string, FixtureTensor> tensors;

  const FixtureTensor& at(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error("fixture has no tensor " + name);
    return it->second;
  }
  const int32_t* inputs() const { return at("inputs").i32.data(); }
  const int32_t* targets() const { return at("targets").i32.data(); }
};

inline ModelConfig config_from_json(const nlohmann::json& c) {
  ModelConfig m;
  m.arch = enum_from_name<Architecture>(c.value("arch", "gpt2"), "arch");
  m.vocab_size = c.at("vocab_size").get<int64_t>();
  m.n_layer = c.at("n_layer").get<int64_t>();
  m.n_head = c.at("n_head").get<int64_t>();
  m.d_model = c.at("d_model").get<int64_t>();
  m.max_seq = c.at("max_seq").get<int64_t>();
  m.n_kv_head = c.value("n_kv_head", int64_t{0});
  m.ffn_hidden = c.value("ffn_hidden", int64_t{0});
  m.rope_theta = c.value("rope_theta", 1e4);
  m.rope_scaling.type = enum_from_name<kernels::RopeScalingType>(
      c.value("rope_scaling", std::string("none")), "rope_scaling");
  m.rope_scaling.factor = c.value("rope_scaling_factor", 1.0);
  m.rope_scaling.low_freq_factor = c.value("rope_low_freq_factor", 1.0);
  m.rope_scaling.high_freq_factor = c.value("rope_high_freq_factor", 4.0);
  m.rope_scaling.original_context = c.value("rope_original_max_seq", int64_t{8192});
  m.rope_scaling.beta_fast = c.value("rope_yarn_beta_fast", 32.0);
  m.rope_scaling.beta_slow = c.value("rope_yarn_beta_slow", 1.0);
  m.rope_scaling.attention_factor = c.value("rope_attention_factor", 0.0);
  m.norm_eps = c.value("norm_eps", 1e-5);
  m.tie_embeddings = c.value("tie_embeddings", true);
  m.moe.n_experts = c.value("moe_experts", int64_t{0});
  m.moe.top_k = c.value("moe_top_k", int64_t{2});
  m.moe.n_shared = c.value("moe_shared_experts", int64_t{0});
  m.moe.capacity_factor = c.value("moe_capacity_factor", 0.0);
  m.moe.aux_loss_coef = c.value("moe_aux_loss_coef", 0.01);
  return m;
}

inline std::unique_ptr<Fixture> read_fixture(const fs::path& dir) {
  std::ifstream json_file(dir / "fixture.json");
  std::ifstream bin_file(dir / "fixture.bin", std::ios::binary);
  if (!json_file || !bin_file) {
    ADD_FAILURE() << "cannot open fixture.json / fixture.bin in " << dir;
    return nullptr;
  }
  const std::vector<char> bin{std::istreambuf_iterator<char>(bin_file), {}};
  const nlohmann::json j = nlohmann::json::parse(json_file);
  auto f = std::make_unique<Fixture>();
  f->config = config_from_json(j.at("config"));
  f->B = j.at("B").get<int64_t>();
  f->T = j.at("T").get<int64_t>();
  f->loss = j.at("loss").get<double>();
  f->aux_loss = j.value("aux_loss", 0.0);
  for (const auto& t : j.at("tensors")) {
    FixtureTensor ft;
    ft.shape = t.at("shape").get<std::vector<int64_t>>();
    ft.dtype = t.at("dtype").get<std::string>();
    const auto offset = t.at("offset").get<size_t>();
    const auto nbytes = t.at("nbytes").get<size_t>();
    int64_t numel = 1;
    for (int64_t d : ft.shape) numel *= d;
    const auto name = t.at("name").get<std::string>();
    if (offset + nbytes > bin.size() || nbytes != size_t(numel) * 4 ||
        (ft.dtype != "f32" && ft.dtype != "i32")) {
      ADD_FAILURE() << "fixture tensor " << name << " is malformed";
      return nullptr;
    }
    // The file is little-endian; so is every host Tessera supports.
    if (ft.dtype == "f32") {
      ft.f32.resize(numel);
      std::memcpy(ft.f32.data(), bin.data() + offset, nbytes);
    } else {
      ft.i32.resize(numel);
      std::memcpy(ft.i32.data(), bin.data() + offset, nbytes);
    }
    f->tensors.emplace(name, std::move(ft));
  }
  return f;
}

// The fixture `script` (under tests/reference) writes with `args`, generated once per process.
inline const Fixture* fixture(const std::string& script, const std::string& args = "") {
  struct Generated {
    std::map<std::string, std::unique_ptr<Fixture>> fixtures;
    std::vector<fs::path> dirs;
    ~Generated() {
      std::error_code ec;
      for (const fs::path& d : dirs) fs::remove_all(d, ec);
    }
  };
  static Generated cache;
  const std::string key = script + " " + args;
  if (auto it = cache.fixtures.find(key); it != cache.fixtures.end()) return it->second.get();
  fs::path dir;
  const char* env = std::getenv("TESSERA_REFERENCE_FIXTURE");
  if (env != nullptr && *env && script == "gpt2_reference.py") {
    dir = env;
  } else {
    std::string tmpl = (fs::temp_directory_path() / "tessera_ref_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp failed for " << tmpl;
      return nullptr;
    }
    dir = tmpl;
    cache.dirs.push_back(dir);
    const std::string command = "/usr/bin/python3 '" + std::string(TESSERA_SOURCE_DIR) +
                                "/tests/reference/" + script + "' --out '" + tmpl + "' " + args;
    if (const int rc = std::system(command.c_str()); rc != 0) {
      ADD_FAILURE() << "fixture generator failed (exit status " << rc << "): " << command
                    << "\nIt needs Debian's PyTorch: apt-get install python3-torch.";
      return nullptr;
    }
  }
  auto loaded = read_fixture(dir);
  const Fixture* result = loaded.get();
  if (loaded) cache.fixtures.emplace(key, std::move(loaded));
  return result;
}

// Copies every fixture parameter into the model by name, checking names and shapes.
inline void load_parameters(const Fixture& f, Transformer& model) {
  for (const auto& [name, view] : named_views(model.layout(), model.params().data())) {
    SCOPED_TRACE(name);
    const FixtureTensor& t = f.at(name);
    ASSERT_EQ(t.dtype, "f32");
    ASSERT_EQ(int(t.shape.size()), view.shape.rank());
    for (int i = 0; i < view.shape.rank(); ++i) ASSERT_EQ(t.shape[i], view.shape[i]);
    std::memcpy(view.data, t.f32.data(), view.nbytes());
  }
}

inline double norm(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s);
}

// For every parameter, ||g - g_ref|| / ||g_ref|| < tol; reports the worst tensor.
inline void expect_grads_match(const Fixture& f, Transformer& model, double tol) {
  std::string worst_name;
  double worst = -1;
  for (const auto& [name, view] : named_views(model.layout(), model.grads().data())) {
    const FixtureTensor& ref = f.at("grad/" + name);
    const float* g = view.as<float>();
    std::vector<float> diff(ref.f32.size());
    for (size_t i = 0; i < diff.size(); ++i) diff[i] = g[i] - ref.f32[i];
    const double ref_norm = norm(ref.f32.data(), int64_t(ref.f32.size()));
    ASSERT_GT(ref_norm, 0) << name << " has an all-zero reference gradient";
    const double err = norm(diff.data(), int64_t(diff.size())) / ref_norm;
    EXPECT_LT(err, tol) << "gradient of " << name << " disagrees with PyTorch";
    if (err > worst) worst = err, worst_name = name;
  }
  std::printf("worst gradient relative error: %s %.3g\n", worst_name.c_str(), worst);
}

}  // namespace tessera::model::reference
