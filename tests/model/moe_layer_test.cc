// The MoE layer against an independent per-token implementation of its routing semantics, its
// backward against central finite differences in f64 (loss sum(r * y) + aux_scale * aux), and
// its degenerate case (one expert, top-1, no aux loss) against a plain SwiGLU MLP.
#include "tessera/model/moe_layer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"
#include "tests/expect_error.h"
#include "tests/kernels/gradient_check.h"

namespace tessera::model {
namespace {

using testing::random_vector;
using testing::relative_gradient_error;
using testing::Tolerance;

ModelConfig moe_config(int64_t C, int64_t F, int64_t E, int64_t k, int64_t S, double capacity,
                       double aux_coef) {
  ModelConfig c;
  c.arch = Architecture::kLlama;
  c.n_head = 1;
  c.d_model = C;
  c.ffn_hidden = F;
  c.moe.n_experts = E;
  c.moe.top_k = k;
  c.moe.n_shared = S;
  c.moe.capacity_factor = capacity;
  c.moe.aux_loss_coef = aux_coef;
  return c;
}

template <typename T>
struct Params {
  std::vector<T> router, gate_up, down, shared_gate_up, shared_down;

  Params(const ModelConfig& c, uint64_t seed) {
    const int64_t C = c.d_model, F = c.ffn(), E = c.moe.n_experts, SF = c.moe.n_shared * F;
    // Router logits of a few units, so the probabilities are far from uniform.
    router = random_vector<T>(E * C, seed, 1.0);
    gate_up = random_vector<T>(E * 2 * F * C, seed + 1, 1.0 / std::sqrt(double(C)));
    down = random_vector<T>(E * C * F, seed + 2, 1.0 / std::sqrt(double(F)));
    shared_gate_up = random_vector<T>(2 * SF * C, seed + 3, 1.0 / std::sqrt(double(C)));
    shared_down =
        random_vector<T>(C * SF, seed + 4, 1.0 / std::sqrt(double(std::max<int64_t>(SF, 1))));
  }
  static T* or_null(std::vector<T>& v) { return v.empty() ? nullptr : v.data(); }
  MoeWeights<T> weights() {
    return {router.data(), gate_up.data(), down.data(), or_null(shared_gate_up),
            or_null(shared_down)};
  }
  MoeGrads<T> grads() {
    return {router.data(), gate_up.data(), down.data(), or_null(shared_gate_up),
            or_null(shared_down)};
  }
};

struct NaiveResult {
  std::vector<double> y;
  double aux = 0;
  std::vector<int64_t> kept;
  int64_t dropped = 0;
};

double silu(double g) { return g / (1 + std::exp(-g)); }

// The layer's specification, token by token, with no gathering or sorting by expert.
NaiveResult naive_moe(const ModelConfig& c, const std::vector<double>& x, int64_t N,
                      Params<double>& p) {
  const int64_t C = c.d_model, F = c.ffn(), E = c.moe.n_experts, k = c.moe.top_k,
                SF = c.moe.n_shared * F;
  auto swiglu_mlp = [&](const double* xt, const double* gate_up, const double* down, int64_t H,
                        double scale, double* out) {
    std::vector<double> a(H);
    for (int64_t f = 0; f < H; ++f) {
      double g = 0, u = 0;
      for (int64_t i = 0; i < C; ++i) {
        g += gate_up[f * C + i] * xt[i];
        u += gate_up[(H + f) * C + i] * xt[i];
      }
      a[f] = silu(g) * u;
    }
    for (int64_t o = 0; o < C; ++o) {
      double s = 0;
      for (int64_t f = 0; f < H; ++f) s += down[o * H + f] * a[f];
      out[o] += scale * s;
    }
  };
  const int64_t capacity =
      c.moe.capacity_factor > 0 ? int64_t(std::ceil(c.moe.capacity_factor * N * k / E)) : N * k;
  NaiveResult r;
  r.y.assign(N * C, 0);
  r.kept.assign(E, 0);
  std::vector<double> routed(E, 0), mean_prob(E, 0);
  for (int64_t t = 0; t < N; ++t) {
    const double* xt = x.data() + t * C;
    std::vector<double> prob(E);
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < C; ++i) prob[e] += p.router[e * C + i] * xt[i];
    }
    const double max = *std::max_element(prob.begin(), prob.end());
    double sum = 0;
    for (double& v : prob) {
      v = std::exp(v - max);
      sum += v;
    }
    for (int64_t e = 0; e < E; ++e) {
      prob[e] /= sum;
      mean_prob[e] += prob[e] / N;
    }
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return prob[a] > prob[b]; });
    double chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += prob[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = order[j];
      routed[e] += 1;
      if (r.kept[e] == capacity) {
        ++r.dropped;
        continue;
      }
      ++r.kept[e];
      swiglu_mlp(xt, p.gate_up.data() + e * 2 * F * C, p.down.data() + e * C * F, F,
                 prob[e] / chosen, r.y.data() + t * C);
    }
    if (SF > 0) {
      swiglu_mlp(xt, p.shared_gate_up.data(), p.shared_down.data(), SF, 1.0, r.y.data() + t * C);
    }
  }
  for (int64_t e = 0; e < E; ++e) r.aux += routed[e] / double(N * k) * mean_prob[e];
  r.aux *= c.moe.aux_loss_coef * double(E);
  return r;
}

struct GradientCase {
  std::string name;
  int64_t top_k, n_shared;
  double capacity_factor;
  bool drops;  // the case must really drop assignments
  double aux_scale;
};

void PrintTo(const GradientCase& c, std::ostream* os) { *os << c.name; }

class MoeGradient : public ::testing::TestWithParam<GradientCase> {};

TEST_P(MoeGradient, MatchesSpecificationAndFiniteDifferences) {
  const GradientCase& tc = GetParam();
  const int64_t N = 12, C = 6, F = 5, E = 4;
  const ModelConfig config = moe_config(C, F, E, tc.top_k, tc.n_shared, tc.capacity_factor, 0.3);
  Params<double> p(config, 10);
  auto x = random_vector<double>(N * C, 20), r = random_vector<double>(N * C, 21);
  std::vector<double> y(N * C), dx(N * C);
  MoeLayer<double> layer(kernels::kCpuContext, config, N + 3);

  const double aux = layer.forward(x.data(), y.data(), N, p.weights());
  const NaiveResult want = naive_moe(config, x, N, p);
  for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(y[i], want.y[i], 1e-12) << "element " << i;
  EXPECT_NEAR(aux, want.aux, 1e-14);
  EXPECT_EQ(layer.dropped(), want.dropped);
  EXPECT_EQ(
      std::vector<int64_t>(layer.tokens_per_expert().begin(), layer.tokens_per_expert().end()),
      want.kept);
  EXPECT_EQ(layer.dropped() > 0, tc.drops);

  auto loss = [&] {
    const double a = layer.forward(x.data(), y.data(), N, p.weights());
    return testing::weighted_sum(y, r) + tc.aux_scale * a;
  };
  // A pass over other tokens (more of them, routed differently) must leave nothing behind. Then
  // two backward passes into zeroed gradients: parameter gradients must accumulate to twice the
  // derivative while dx is overwritten.
  Params<double> g = p;
  {
    auto other = random_vector<double>((N + 3) * C, 22), other_y = other;
    layer.forward(other.data(), other_y.data(), N + 3, p.weights());
    layer.backward(other.data(), other.data(), other_y.data(), N + 3, p.weights(), g.grads(), 1.0);
  }
  for (auto* v : {&g.router, &g.gate_up, &g.down, &g.shared_gate_up, &g.shared_down}) {
    std::fill(v->begin(), v->end(), 0.0);
  }
  for (int pass = 0; pass < 2; ++pass) {
    layer.forward(x.data(), y.data(), N, p.weights());
    layer.backward(r.data(), x.data(), dx.data(), N, p.weights(), g.grads(), tc.aux_scale);
  }
  for (auto* v : {&g.router, &g.gate_up, &g.down, &g.shared_gate_up, &g.shared_down}) {
    for (double& d : *v) d /= 2;
  }
  const double bound = Tolerance<double>::kMaxRelError;
  EXPECT_LT(relative_gradient_error(x, loss, dx), bound) << "x";
  EXPECT_LT(relative_gradient_error(p.router, loss, g.router), bound) << "router";
  EXPECT_LT(relative_gradient_error(p.gate_up, loss, g.gate_up), bound) << "gate_up";
  EXPECT_LT(relative_gradient_error(p.down, loss, g.down), bound) << "down";
  if (tc.n_shared > 0) {
    EXPECT_LT(relative_gradient_error(p.shared_gate_up, loss, g.shared_gate_up), bound);
    EXPECT_LT(relative_gradient_error(p.shared_down, loss, g.shared_down), bound);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeGradient,
    ::testing::Values(GradientCase{"Top1Dropless", 1, 0, 0.0, false, 1.0},
                      GradientCase{"Top2DroplessShared", 2, 1, 0.0, false, 1.0},
                      GradientCase{"Top1CapacityTwoShared", 1, 2, 1.0, true, 1.0},
                      GradientCase{"Top2Capacity", 2, 0, 1.0, true, 1.0},
                      GradientCase{"Top2CapacitySharedScaledAux", 2, 1, 1.0, true, 0.25}),
    [](const ::testing::TestParamInfo<GradientCase>& info) { return info.param.name; });

// LoRA adapters on every expert's gate_up (gate and up each its own) and down, the experts and
// router frozen: the output is that of experts whose weights have the updates merged in, and the
// adapters' and the input's gradients match central differences in f64, dropped assignments
// included.
TEST(MoeExpertAdapters, MatchMergedWeightsAndFiniteDifferences) {
  const int64_t N = 12, C = 6, F = 5, E = 4, r = 2;
  for (const double capacity : {0.0, 1.0}) {
    SCOPED_TRACE(capacity);
    ModelConfig config = moe_config(C, F, E, 2, 1, capacity, 0.3);
    config.lora = {.rank = r, .alpha = 3, .targets = "experts"};
    const double scale = config.lora.scale();
    Params<double> p(config, 40);
    auto gate_up_a = random_vector<double>(E * 2 * r * C, 45, 0.5),
         gate_up_b = random_vector<double>(E * 2 * F * r, 46, 0.5),
         down_a = random_vector<double>(E * r * F, 47, 0.5),
         down_b = random_vector<double>(E * C * r, 48, 0.5);
    auto x = random_vector<double>(N * C, 49), dy = random_vector<double>(N * C, 50);
    MoeWeights<double> w = p.weights();
    w.gate_up_a = gate_up_a.data();
    w.gate_up_b = gate_up_b.data();
    w.down_a = down_a.data();
    w.down_b = down_b.data();
    MoeLayer<double> layer(kernels::kCpuContext, config, N);
    std::vector<double> y(N * C), dx(N * C);
    layer.forward(x.data(), y.data(), N, w);

    // W_e += scale B_e A_e, gate's and up's pieces each from their own rank rows of A.
    Params<double> merged = p;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t o = 0; o < 2 * F; ++o) {
        const int64_t piece = o / F;
        for (int64_t i = 0; i < C; ++i) {
          double d = 0;
          for (int64_t k = 0; k < r; ++k) {
            d +=
                gate_up_b[(e * 2 * F + o) * r + k] * gate_up_a[(e * 2 * r + piece * r + k) * C + i];
          }
          merged.gate_up[(e * 2 * F + o) * C + i] += scale * d;
        }
      }
      for (int64_t o = 0; o < C; ++o) {
        for (int64_t i = 0; i < F; ++i) {
          double d = 0;
          for (int64_t k = 0; k < r; ++k)
            d += down_b[(e * C + o) * r + k] * down_a[(e * r + k) * F + i];
          merged.down[(e * C + o) * F + i] += scale * d;
        }
      }
    }
    const NaiveResult want = naive_moe(config, x, N, merged);
    for (int64_t i = 0; i < N * C; ++i) ASSERT_NEAR(y[i], want.y[i], 1e-12) << "element " << i;
    EXPECT_EQ(layer.dropped() > 0, capacity > 0);

    std::vector<double> d_gate_up_a(gate_up_a.size()), d_gate_up_b(gate_up_b.size()),
        d_down_a(down_a.size()), d_down_b(down_b.size());
    MoeGrads<double> g{nullptr, nullptr, nullptr, nullptr, nullptr};
    g.gate_up_a = d_gate_up_a.data();
    g.gate_up_b = d_gate_up_b.data();
    g.down_a = d_down_a.data();
    g.down_b = d_down_b.data();
    layer.backward(dy.data(), x.data(), dx.data(), N, w, g, 0.5);
    auto loss = [&] {
      const double aux = layer.forward(x.data(), y.data(), N, w);
      return testing::weighted_sum(y, dy) + 0.5 * aux;
    };
    const double bound = Tolerance<double>::kMaxRelError;
    EXPECT_LT(relative_gradient_error(x, loss, dx), bound) << "x";
    EXPECT_LT(relative_gradient_error(gate_up_a, loss, d_gate_up_a), bound) << "gate_up A";
    EXPECT_LT(relative_gradient_error(gate_up_b, loss, d_gate_up_b), bound) << "gate_up B";
    EXPECT_LT(relative_gradient_error(down_a, loss, d_down_a), bound) << "down A";
    EXPECT_LT(relative_gradient_error(down_b, loss, d_down_b), bound) << "down B";
  }
}

template <typename T>
class MoeSingleExpert : public ::testing::Test {};
using Precisions = ::testing::Types<double, float>;
TYPED_TEST_SUITE(MoeSingleExpert, Precisions);

// One expert chosen with gate 1 and no aux loss is a SwiGLU MLP, bit for bit, and its router
// receives exactly zero gradient.
TYPED_TEST(MoeSingleExpert, EqualsPlainSwiGluMlp) {
  using T = TypeParam;
  const int64_t N = 9, C = 8, F = 12;
  const ModelConfig config = moe_config(C, F, 1, 1, 0, 0.0, 0.0);
  Params<T> p(config, 30);
  auto x = random_vector<T>(N * C, 31), dy = random_vector<T>(N * C, 32);

  MoeLayer<T> layer(kernels::kCpuContext, config, N);
  Params<T> g = p;
  for (auto* v : {&g.router, &g.gate_up, &g.down}) std::fill(v->begin(), v->end(), T(0));
  std::vector<T> y(N * C), dx(N * C);
  EXPECT_EQ(layer.forward(x.data(), y.data(), N, p.weights()), T(0));
  layer.backward(dy.data(), x.data(), dx.data(), N, p.weights(), g.grads(), T(1));

  std::vector<T> h(N * 2 * F), a(N * F), want_y(N * C), da(N * F), dh(N * 2 * F), want_dx(N * C),
      want_dgate_up(2 * F * C), want_ddown(C * F);
  kernels::linear_forward<T>(kernels::kCpuContext, x.data(), p.gate_up.data(), nullptr, h.data(), N,
                             C, 2 * F);
  kernels::swiglu_forward<T>(kernels::kCpuContext, h.data(), a.data(), N, F);
  kernels::linear_forward<T>(kernels::kCpuContext, a.data(), p.down.data(), nullptr, want_y.data(),
                             N, F, C);
  kernels::linear_backward<T>(kernels::kCpuContext, dy.data(), a.data(), p.down.data(), da.data(),
                              want_ddown.data(), nullptr, N, F, C);
  kernels::swiglu_backward<T>(kernels::kCpuContext, da.data(), h.data(), dh.data(), N, F);
  kernels::linear_backward<T>(kernels::kCpuContext, dh.data(), x.data(), p.gate_up.data(),
                              want_dx.data(), want_dgate_up.data(), nullptr, N, C, 2 * F);

  EXPECT_EQ(y, want_y);
  EXPECT_EQ(dx, want_dx);
  EXPECT_EQ(g.gate_up, want_dgate_up);
  EXPECT_EQ(g.down, want_ddown);
  EXPECT_EQ(g.router, std::vector<T>(C, T(0)));
  EXPECT_EQ(layer.tokens_per_expert()[0], N);
  EXPECT_EQ(layer.dropped(), 0);
}

// Token t's router logits are x[t] itself (identity router): 3 on its first expert, 1 on its
// second, 0 elsewhere; the last token is all zeros, a four-way tie.
TEST(MoeRouting, CountsCapacityAndTies) {
  const int64_t N = 7, E = 4, C = E, F = 2;
  const int64_t choices[N][2] = {{0, 1}, {0, 2}, {0, 1}, {1, 0}, {0, 3}, {2, 0}, {-1, -1}};
  std::vector<float> x(N * C, 0.0f);
  for (int64_t t = 0; t < N; ++t) {
    if (choices[t][0] < 0) continue;
    x[t * C + choices[t][0]] = 3.0f;
    x[t * C + choices[t][1]] = 1.0f;
  }
  std::vector<float> y(N * C);

  // Capacity ceil(1.0 * 7 * 2 / 4) = 4. In visiting order expert 0 fills up with tokens 0, 1,
  // 2, 3, so tokens 4 and 5 lose it, and so does the tie token, which picks experts 0 and 1.
  ModelConfig config = moe_config(C, F, E, 2, 0, 1.0, 0.5);
  Params<float> p(config, 40);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t c = 0; c < C; ++c) p.router[e * C + c] = e == c ? 1.0f : 0.0f;
  }
  MoeLayer<float> layer(kernels::kCpuContext, config, N);
  const float aux = layer.forward(x.data(), y.data(), N, p.weights());
  EXPECT_EQ(
      std::vector<int64_t>(layer.tokens_per_expert().begin(), layer.tokens_per_expert().end()),
      (std::vector<int64_t>{4, 4, 2, 1}));
  EXPECT_EQ(layer.dropped(), 3);
  // f = {7, 4, 2, 1} / 14; P from the two logit patterns: e^3, e, 1, 1 over Z = e^3 + e + 2,
  // and a quarter each for the tie token.
  const double z = std::exp(3.0) + std::exp(1.0) + 2, hi = std::exp(3.0) / z,
               mid = std::exp(1.0) / z, lo = 1 / z;
  const double P[E] = {(4 * hi + 2 * mid + 0.25) / N, (2 * mid + hi + 3 * lo + 0.25) / N,
                       (mid + hi + lo * 4 + 0.25) / N, (mid + lo * 5 + 0.25) / N};
  const double f[E] = {7 / 14.0, 4 / 14.0, 2 / 14.0, 1 / 14.0};
  double want_aux = 0;
  for (int64_t e = 0; e < E; ++e) want_aux += f[e] * P[e];
  EXPECT_NEAR(aux, 0.5 * E * want_aux, 1e-6);

  config.moe.capacity_factor = 0;
  MoeLayer<float> dropless(kernels::kCpuContext, config, N);
  dropless.forward(x.data(), y.data(), N, p.weights());
  EXPECT_EQ(std::vector<int64_t>(dropless.tokens_per_expert().begin(),
                                 dropless.tokens_per_expert().end()),
            (std::vector<int64_t>{7, 4, 2, 1}));
  EXPECT_EQ(dropless.dropped(), 0);
}

TEST(MoeLayer, RepeatsBitForBit) {
  const int64_t N = 64, C = 16, F = 24;
  const ModelConfig config = moe_config(C, F, 8, 2, 1, 1.25, 0.01);
  Params<float> p(config, 50);
  auto x = random_vector<float>(N * C, 51), dy = random_vector<float>(N * C, 52);
  MoeLayer<float> layer(kernels::kCpuContext, config, N);
  auto run = [&] {
    Params<float> g = p;
    for (auto* v : {&g.router, &g.gate_up, &g.down, &g.shared_gate_up, &g.shared_down}) {
      std::fill(v->begin(), v->end(), 0.0f);
    }
    std::vector<float> y(N * C), dx(N * C);
    layer.forward(x.data(), y.data(), N, p.weights());
    layer.backward(dy.data(), x.data(), dx.data(), N, p.weights(), g.grads(), 1.0f);
    return std::vector<std::vector<float>>{
        y, dx, g.router, g.gate_up, g.down, g.shared_gate_up, g.shared_down};
  };
  EXPECT_EQ(run(), run());
}

// Every kernel of the layer runs in the context it was built with. Double-precision kernels exist
// on the CPU alone, so a layer given a CUDA context refuses its first kernel, naming the device,
// in any build and on any machine; given the CPU's, the same layer computes.
TEST(MoeLayer, RunsItsKernelsInTheContextItIsGiven) {
  const int64_t N = 8, C = 6, F = 5;
  const ModelConfig config = moe_config(C, F, 4, 2, 1, 0.0, 0.01);
  Params<double> p(config, 70);
  const auto x = random_vector<double>(N * C, 71);
  std::vector<double> y(N * C, 0.0);
  kernels::Context cuda;
  cuda.device.kind = kernels::DeviceKind::kCuda;
  MoeLayer<double> on_cuda(cuda, config, N);
  testing::expect_error([&] { on_cuda.forward(x.data(), y.data(), N, p.weights()); },
                        {"cannot run on a CUDA device"});
  MoeLayer<double> on_cpu(kernels::kCpuContext, config, N);
  on_cpu.forward(x.data(), y.data(), N, p.weights());
  EXPECT_NE(y, std::vector<double>(N * C, 0.0));
}

TEST(MoeLayer, RejectsBadSizes) {
  const ModelConfig config = moe_config(4, 2, 2, 1, 0, 0.0, 0.01);
  Params<float> p(config, 60);
  MoeLayer<float> layer(kernels::kCpuContext, config, 3);
  std::vector<float> x(4 * 4), y(4 * 4);
  EXPECT_THROW(layer.forward(x.data(), y.data(), 4, p.weights()), Error);
  ModelConfig dense = config;
  dense.moe.n_experts = 0;
  EXPECT_THROW(MoeLayer<float>(kernels::kCpuContext, dense, 3), Error);
}

// Dropless, a rank's experts may receive every assignment of the expert-parallel group; a
// capacity factor bounds them by their experts' capacity over the batch's ranks.
TEST(MoeRows, CapacityBoundsTheRowsExpertsReceive) {
  MoeConfig moe;
  moe.n_experts = 4;
  moe.top_k = 2;
  EXPECT_EQ(moe_rows(moe, 32, 4, 4).received, 32 * 2 * 4);
  moe.capacity_factor = 1.25;
  // One local expert of capacity ceil(1.25 x 128 tokens x 2 / 4) = 80.
  EXPECT_EQ(moe_rows(moe, 32, 4, 4).received, 80);
  // On one rank its own 64 assignments are the tighter bound.
  EXPECT_EQ(moe_rows(moe, 32, 1, 1).received, 64);
  moe.n_shared = 3;
  EXPECT_EQ(moe_rows(moe, 32, 1, 1).hidden, 96);
}

}  // namespace
}  // namespace tessera::model
