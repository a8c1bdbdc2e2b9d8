// GPT-2 forward/backward against PyTorch, and a whole-model finite-difference spot check.
//
// The reference fixture comes from tests/reference/gpt2_reference.py (an independent PyTorch
// implementation run with Debian's python3-torch). Set TESSERA_REFERENCE_FIXTURE to a directory
// the script wrote; otherwise the test runs the script itself into a temporary directory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tessera/model/gpt2.h"
#include "tessera/model/parameters.h"

namespace tessera::model {
namespace {

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
  float loss = 0;
  std::map<std::string, FixtureTensor> tensors;

  const FixtureTensor& at(const std::string& name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw std::runtime_error("fixture has no tensor " + name);
    return it->second;
  }
};

// Runs the generator into a fresh temporary directory and returns it, or fails the test.
std::string generate_fixture() {
  std::string tmpl = (fs::temp_directory_path() / "tessera_gpt2_ref_XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    return {};
  }
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/tests/reference/gpt2_reference.py";
  const std::string command = "/usr/bin/python3 '" + script + "' --out '" + tmpl + "'";
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "fixture generator failed (exit status " << rc << "): " << command
                  << "\nIt needs Debian's PyTorch: install python3-torch (apt-get install "
                     "python3-torch), or point TESSERA_REFERENCE_FIXTURE at a directory the "
                     "script wrote.";
    return {};
  }
  return tmpl;
}

// Loads the fixture once per process; a generated one is deleted when the process exits.
const Fixture* fixture() {
  static const Fixture* loaded = []() -> const Fixture* {
    static fs::path generated;
    struct Cleanup {
      ~Cleanup() {
        std::error_code ec;
        if (!generated.empty()) fs::remove_all(generated, ec);
      }
    };
    static Cleanup cleanup;
    std::string dir;
    if (const char* env = std::getenv("TESSERA_REFERENCE_FIXTURE"); env != nullptr && *env) {
      dir = env;
    } else {
      dir = generate_fixture();
      if (dir.empty()) return nullptr;
      generated = dir;
    }
    std::ifstream json_file(fs::path(dir) / "fixture.json");
    std::ifstream bin_file(fs::path(dir) / "fixture.bin", std::ios::binary);
    if (!json_file || !bin_file) {
      ADD_FAILURE() << "cannot open fixture.json / fixture.bin in " << dir;
      return nullptr;
    }
    const std::vector<char> bin{std::istreambuf_iterator<char>(bin_file), {}};
    const nlohmann::json j = nlohmann::json::parse(json_file);
    auto* f = new Fixture;
    const auto& c = j.at("config");
    f->config.vocab_size = c.at("vocab_size").get<int64_t>();
    f->config.n_layer = c.at("n_layer").get<int64_t>();
    f->config.n_head = c.at("n_head").get<int64_t>();
    f->config.d_model = c.at("d_model").get<int64_t>();
    f->config.max_seq = c.at("max_seq").get<int64_t>();
    f->B = j.at("B").get<int64_t>();
    f->T = j.at("T").get<int64_t>();
    f->loss = j.at("loss").get<float>();
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
        delete f;
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
  }();
  return loaded;
}

// Copies every fixture parameter into the model by name, checking names and shapes.
void load_parameters(const Fixture& f, Gpt2& model) {
  for (const auto& [name, view] : named_views(model.layout(), model.params().data())) {
    SCOPED_TRACE(name);
    const FixtureTensor& t = f.at(name);
    ASSERT_EQ(t.dtype, "f32");
    ASSERT_EQ(int(t.shape.size()), view.shape.rank());
    for (int i = 0; i < view.shape.rank(); ++i) ASSERT_EQ(t.shape[i], view.shape[i]);
    std::memcpy(view.data, t.f32.data(), view.nbytes());
  }
}

double norm(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return std::sqrt(s);
}

// For every parameter, ||g - g_ref|| / ||g_ref|| < tol; reports the worst tensor.
void expect_grads_match(const Fixture& f, Gpt2& model, double tol) {
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

TEST(Gpt2Reference, MatchesPyTorchLossAndGradients) {
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  ASSERT_LT(f->T, f->config.max_seq) << "the fixture should leave some positions unused";
  Gpt2 model(f->config, f->B, f->T, /*training=*/true);
  load_parameters(*f, model);
  const int32_t* inputs = f->at("inputs").i32.data();
  const int32_t* targets = f->at("targets").i32.data();

  model.zero_grad();
  const float loss = model.forward_backward(inputs, targets, f->B, f->T, 1.0f);
  std::printf("loss %.7f, PyTorch %.7f\n", loss, f->loss);
  EXPECT_LT(std::abs(loss - f->loss) / std::abs(f->loss), 1e-4);
  expect_grads_match(*f, model, 1e-4);

  const float eval_loss = model.forward(inputs, targets, f->B, f->T);
  EXPECT_LT(std::abs(eval_loss - f->loss) / std::abs(f->loss), 1e-4);
  EXPECT_NEAR(eval_loss, loss, 1e-6 * std::abs(loss));
}

TEST(Gpt2Reference, TwoHalfScaledMicroStepsAccumulateToReference) {
  const Fixture* f = fixture();
  ASSERT_NE(f, nullptr);
  Gpt2 model(f->config, f->B, f->T, /*training=*/true);
  load_parameters(*f, model);
  const int32_t* inputs = f->at("inputs").i32.data();
  const int32_t* targets = f->at("targets").i32.data();

  model.zero_grad();
  for (int step = 0; step < 2; ++step) {
    const float loss = model.forward_backward(inputs, targets, f->B, f->T, 0.5f);
    EXPECT_LT(std::abs(loss - f->loss) / std::abs(f->loss), 1e-4);
  }
  expect_grads_match(*f, model, 1e-4);
}

// Whole-model central differences in float32, no torch needed: (L(p+h) - L(p-h)) / 2h from
// forward() against forward_backward()'s gradient, relative error < 2e-2 wherever
// |grad| > 1e-3. Step h = 1e-2 balances two errors. Rounding: f32 perturbs the loss (a few units)
// by ~1e-6, i.e. ~5e-5 in the quotient, under 5% of the smallest gradient compared and far less for
// typical ones (|grad| ~ 0.1). Truncation: O(h^2), measured 0.1-0.7% worst over 450 seeds with this
// config, scaling as h^2 as it should. It grows with the curvature of LayerNorm in its input,
// ~rstd^2, hence embeddings of unit scale and d_model 16: with d_model 8 and 0.3-scale embeddings,
// single wpe elements reached 20% truncation error at h = 1e-2 (yet converged to the backward value
// as h shrank).
TEST(Gpt2FiniteDifference, SpotCheckMatchesBackward) {
  ModelConfig config;
  config.vocab_size = 11;
  config.n_layer = 2;
  config.n_head = 2;
  config.d_model = 16;
  config.max_seq = 8;
  const int64_t B = 2, T = 5;
  Gpt2 model(config, B, T, /*training=*/true);

  // Random non-trivial weights, like the PyTorch fixture (LayerNorm gains around 1, nonzero
  // biases, Linear weights ~ 1/sqrt(fan_in)) but unit-scale embeddings, see above.
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const auto& [name, view] : named_views(model.layout(), model.params().data())) {
    float* p = view.as<float>();
    const bool is_norm = name.find(".ln") != std::string::npos || name.rfind("lnf.", 0) == 0;
    const bool is_weight = name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    for (int64_t i = 0; i < view.numel(); ++i) {
      const float r = normal(rng);
      if (is_norm) {
        p[i] = is_weight ? 1.0f + 0.2f * r : 0.1f * r;
      } else if (!is_weight) {
        p[i] = 0.05f * r;
      } else if (name == "wte.weight" || name == "wpe.weight") {
        p[i] = r;
      } else {
        p[i] = r / std::sqrt(float(view.shape[1]));
      }
    }
  }
  std::vector<int32_t> inputs(B * T), targets(B * T);
  std::uniform_int_distribution<int32_t> token(0, int32_t(config.vocab_size) - 1);
  for (auto& t : inputs) t = token(rng);
  for (auto& t : targets) t = token(rng);

  model.zero_grad();
  model.forward_backward(inputs.data(), targets.data(), B, T, 1.0f);
  const std::vector<float> grads(model.grads().begin(), model.grads().end());

  // Two elements from each of these, then the rest from anywhere. Within a tensor, the element
  // is the largest-|grad| of a few random candidates, so most samples clear the 1e-3 floor.
  const std::vector<std::string> required = {"wte.weight",           "wpe.weight",
                                             "blocks.0.ln1.bias",    "blocks.1.attn.qkv.weight",
                                             "blocks.0.fcproj.bias", "lnf.weight"};
  const auto& entries = model.layout().entries();
  std::vector<const ParamInfo*> picks;
  for (const auto& name : required) {
    picks.push_back(&model.layout().find(name));
    picks.push_back(&model.layout().find(name));
  }
  std::uniform_int_distribution<size_t> any_entry(0, entries.size() - 1);
  while (picks.size() < 22) picks.push_back(&entries[any_entry(rng)]);

  const float h = 1e-2f;
  float* params = model.params().data();
  int compared = 0;
  double worst = 0;
  for (const ParamInfo* info : picks) {
    const int64_t n = info->shape.numel();
    std::uniform_int_distribution<int64_t> element(0, n - 1);
    int64_t best = element(rng);
    for (int k = 0; k < 4; ++k) {
      const int64_t c = element(rng);
      if (std::abs(grads[info->offset + c]) > std::abs(grads[info->offset + best])) best = c;
    }
    const int64_t at = info->offset + best;
    const float saved = params[at];
    params[at] = saved + h;
    const float up = model.forward(inputs.data(), targets.data(), B, T);
    params[at] = saved - h;
    const float down = model.forward(inputs.data(), targets.data(), B, T);
    params[at] = saved;
    const double numeric = (double(up) - double(down)) / (2.0 * h);
    const double analytic = grads[at];
    if (std::abs(analytic) <= 1e-3) continue;
    ++compared;
    const double rel = std::abs(numeric - analytic) / std::abs(analytic);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, 2e-2) << info->name << "[" << best << "]: finite difference " << numeric
                         << ", backward " << analytic;
  }
  std::printf("finite differences: %d elements compared, worst relative error %.3g\n", compared,
              worst);
  EXPECT_GE(compared, 12) << "too few sampled gradients above the 1e-3 floor";
}

}  // namespace
}  // namespace tessera::model
