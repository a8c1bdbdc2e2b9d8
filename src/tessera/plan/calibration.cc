#include "tessera/plan/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/model_layout.h"

namespace tessera::plan {

namespace {

namespace k = kernels;
using model::Architecture;
using model::ModelConfig;
using model::Recompute;

constexpr double kFloat = sizeof(float);
// A measured gemm does at most this much work: its largest dimension is cut down, but never
// below kMinMeasuredDim, where the rate of these shapes has stopped changing with size.
constexpr double kMaxMeasuredFlops = 4e8;
constexpr int64_t kMinMeasuredDim = 2048;
// Bandwidth arrays stop growing here (3 x 128 MiB), well past the point where they stream
// from DRAM.
constexpr int64_t kMaxBandwidthFloats = int64_t{32} << 20;
// The trainer's default gradient bucket (dist.bucket_mb).
constexpr int64_t kAllReduceFloats = int64_t{1} << 20;
// Each rate comes from the fastest of several timed runs after one warm-up, at least kMinRuns
// and more until they add up to kMinSeconds: on a shared machine that is the rate at moments
// when nothing else competes for the cores, which a short kernel often catches.
constexpr int kMinRuns = 3;
constexpr double kMinSeconds = 0.02;

bool is_gpt2(const ModelConfig& c) { return c.arch == Architecture::kGpt2; }
int64_t mlp_hidden_width(const ModelConfig& c) { return is_gpt2(c) ? c.ffn() : 2 * c.ffn(); }

template <typename Fn>
double fastest_seconds(Fn&& fn) {
  fn();
  double best = 0, total = 0;
  for (int run = 0; run < kMinRuns || total < kMinSeconds; ++run) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = run == 0 ? s : std::min(best, s);
    total += s;
  }
  return best;
}

std::vector<float> filled(int64_t n, uint64_t seed) {
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(0.01 * (int64_t((i * seed) % 2001) - 1000));
  return v;
}

struct Linear {
  int64_t in, out;
  bool bias;
};

// The linear layers of one block, in forward order.
std::vector<Linear> block_linears(const ModelConfig& c) {
  const bool bias = is_gpt2(c);
  const int64_t C = c.d_model, HD = c.n_head * c.head_dim();
  return {{C, c.qkv_width(), bias}, {HD, C, bias}, {C, mlp_hidden_width(c), bias},
          {c.ffn(), C, bias}};
}

// kernels::linear_forward and linear_backward's gemms.
GemmShape forward_gemm(const Linear& l, int64_t N) { return {false, true, N, l.out, l.in, l.bias}; }
GemmShape input_grad_gemm(const Linear& l, int64_t N) {
  return {false, false, N, l.in, l.out, false};
}
GemmShape weight_grad_gemm(const Linear& l, int64_t N) {
  return {true, false, l.out, l.in, N, true};
}

GemmShape measured_shape(GemmShape s) {
  int64_t* largest = &s.m;
  if (s.n > *largest) largest = &s.n;
  if (s.k > *largest) largest = &s.k;
  const double cut = kMaxMeasuredFlops / s.flops();
  if (cut < 1) *largest = std::min(*largest, std::max(kMinMeasuredDim, int64_t(*largest * cut)));
  return s;
}

double gemm_rate(const GemmShape& s, std::vector<float>& a, std::vector<float>& b,
                 std::vector<float>& c) {
  const int64_t lda = s.trans_a ? s.m : s.k, ldb = s.trans_b ? s.k : s.n;
  const double seconds = fastest_seconds([&] {
    k::gemm<float>(s.trans_a, s.trans_b, s.m, s.n, s.k, 1.0f, a.data(), lda, b.data(), ldb,
                   s.accumulate ? 1.0f : 0.0f, c.data(), s.n);
  });
  return s.flops() / seconds;
}

std::map<GemmShape, double> measure_gemms(const ModelConfig& config, const StepShape& step) {
  std::map<GemmShape, GemmShape> measured;
  int64_t a_size = 0, b_size = 0, c_size = 0;
  for (const auto& [shape, calls] : step_gemms(config, step)) {
    const GemmShape m = measured_shape(shape);
    measured.emplace(shape, m);
    a_size = std::max(a_size, m.m * m.k);
    b_size = std::max(b_size, m.k * m.n);
    c_size = std::max(c_size, m.m * m.n);
  }
  std::vector<float> a = filled(a_size, 7), b = filled(b_size, 11), c = filled(c_size, 13);
  std::map<GemmShape, double> rates;
  for (const auto& [shape, m] : measured) rates[shape] = gemm_rate(m, a, b, c);
  return rates;
}

// Batch for timing attention: enough (batch, head) tasks to keep every thread busy, and no more.
int64_t attention_batch(const ModelConfig& c, const StepShape& step) {
  const int64_t tasks_per_batch = c.kv_heads();
  return std::min(step.batch, std::max<int64_t>(1, (4 * num_threads() + tasks_per_batch - 1) /
                                                       tasks_per_batch));
}

void measure_attention(const ModelConfig& c, const StepShape& step, MachineRates& rates) {
  const StepShape timed{attention_batch(c, step), step.seq, step.recompute};
  const int64_t N = timed.batch * timed.seq, H = c.n_head, KVH = c.kv_heads(), hd = c.head_dim();
  std::vector<float> qkv = filled(N * c.qkv_width(), 17), dqkv(qkv.size());
  std::vector<float> out(N * H * hd), dout = filled(N * H * hd, 19), lse(N * H);
  std::vector<float> scratch(k::attention_scratch_size(step.seq) * num_threads());
  for (float& x : qkv) x *= 0.1f;  // moderate scores, as trained models have
  const double forward = fastest_seconds([&] {
    k::attention_forward(qkv.data(), out.data(), lse.data(), scratch.data(), timed.batch,
                         timed.seq, H, KVH, hd);
  });
  const double backward = fastest_seconds([&] {
    k::attention_backward(dout.data(), qkv.data(), lse.data(), dqkv.data(), scratch.data(),
                          timed.batch, timed.seq, H, KVH, hd);
  });
  rates.attention_seq = step.seq;
  rates.attention_head_dim = hd;
  rates.attention_forward_flops = attention_flops(c, timed, false) / forward;
  rates.attention_backward_flops = attention_flops(c, timed, true) / backward;
}

double add_bandwidth(int64_t n) {
  std::vector<float> a = filled(n, 23), b = filled(n, 29), out(a.size());
  return 3 * kFloat * double(n) /
         fastest_seconds([&] { k::add(a.data(), b.data(), out.data(), n); });
}

double fill_bandwidth(int64_t n) {
  std::vector<float> g(size_t(n), 1.0f);
  return kFloat * double(n) / fastest_seconds([&] { std::fill(g.begin(), g.end(), 0.0f); });
}

double allreduce_bandwidth(dist::Communicator& dp) {
  std::vector<float> bucket = filled(kAllReduceFloats, 31);
  dp.barrier();
  double seconds =
      fastest_seconds([&] { dp.all_reduce(bucket.data(), kAllReduceFloats, DType::f32); });
  // Every rank must report the same rate.
  dp.all_reduce(&seconds, 1);
  seconds /= dp.size();
  return kFloat * double(kAllReduceFloats) / seconds;
}

void check_modelled(const ModelConfig& c, const StepShape& step) {
  check(!c.is_moe(), "the step-time model does not cover mixture-of-experts blocks");
  check(step.batch >= 1 && step.seq >= 1 && step.seq <= c.max_seq,
        "step of batch {} x seq {} does not fit a model with max_seq {}", step.batch, step.seq,
        c.max_seq);
}

// Elements moved (read plus written) by the memory-bound kernels of one block. Norms read their
// input and write their output; their backward reads dy and x and accumulates into dx, then
// reads dy and x again for the weight gradients. Biases are first broadcast into the output
// (a write), and their gradients read dy once.
struct BlockTraffic {
  double forward = 0, backward = 0, selective_recompute = 0;
};

BlockTraffic block_traffic(const ModelConfig& c, int64_t N) {
  const double NC = double(N) * c.d_model, NF = double(N) * c.ffn();
  const double rope = 2.0 * N * (c.n_head + c.kv_heads()) * c.head_dim();  // q and k, in place
  double bias = 0;
  for (const Linear& l : block_linears(c)) bias += l.bias ? double(N) * l.out : 0;
  const double norm_forward = 2 * NC, norm_backward = 6 * NC, residual_add = 3 * NC;
  // GELU reads x and writes y; SwiGLU reads gate and up and writes their product.
  const double act_forward = is_gpt2(c) ? 2 * NF : 3 * NF;
  const double act_backward = is_gpt2(c) ? 3 * NF : 5 * NF;
  const double positions = is_gpt2(c) ? 0 : rope;
  BlockTraffic t;
  t.forward = 2 * norm_forward + 2 * residual_add + act_forward + bias + positions;
  t.backward = 2 * norm_backward + act_backward + bias + positions;
  t.selective_recompute = 2 * norm_forward + act_forward;
  return t;
}

// Elements moved outside the blocks: embedding, final norm, loss, and the gradient of the
// residual stream cleared before backward.
double outer_traffic(const ModelConfig& c, int64_t N) {
  const double NC = double(N) * c.d_model, NV = double(N) * c.vocab_size;
  // GPT-2 adds a position row to each token row; backward adds the row gradient to both tables.
  const double embed_forward = is_gpt2(c) ? 3 * NC : 2 * NC;
  const double embed_backward = is_gpt2(c) ? 5 * NC : 3 * NC;
  // The fused loss reads each logits row and overwrites it with its gradient; the row stays in
  // cache between its three passes.
  const double loss = 2 * NV;
  return embed_forward + 2 * NC + loss + NC + 6 * NC + embed_backward;
}

}  // namespace

std::string GemmShape::name() const {
  return fmt::format("{}{} {}x{}x{}{}", trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                     accumulate ? " +C" : "");
}

std::map<GemmShape, int64_t> step_gemms(const ModelConfig& config, const StepShape& step) {
  check_modelled(config, step);
  const int64_t N = step.batch * step.seq;
  std::map<GemmShape, int64_t> calls;
  const bool full = step.recompute == Recompute::kFull;
  for (const Linear& l : block_linears(config)) {
    calls[forward_gemm(l, N)] += config.n_layer * (full ? 2 : 1);
    calls[input_grad_gemm(l, N)] += config.n_layer;
    calls[weight_grad_gemm(l, N)] += config.n_layer;
  }
  const Linear head{config.d_model, config.vocab_size, false};
  ++calls[forward_gemm(head, N)];
  ++calls[input_grad_gemm(head, N)];
  ++calls[weight_grad_gemm(head, N)];
  return calls;
}

double attention_flops(const ModelConfig& c, const StepShape& step, bool backward) {
  const double square = 2.0 * double(step.seq) * double(step.seq) * double(c.head_dim());
  return double(step.batch) * double(c.n_head) * square * (backward ? 5 : 2);
}

MachineRates measure_machine(const ModelConfig& config, const StepShape& step,
                             dist::Communicator& dp) {
  check_modelled(config, step);
  MachineRates rates;
  rates.threads = num_threads();
  rates.gemm_flops = measure_gemms(config, step);
  measure_attention(config, step, rates);
  const int64_t params = std::min(model::model_layout(config).params.total(), kMaxBandwidthFloats);
  rates.parameter_bandwidth = add_bandwidth(params);
  rates.fill_bandwidth = fill_bandwidth(params);
  rates.activation_bandwidth = add_bandwidth(step.batch * step.seq * mlp_hidden_width(config));
  rates.ranks = dp.size();
  if (dp.size() > 1) rates.allreduce_bandwidth = allreduce_bandwidth(dp);
  return rates;
}

StepPrediction predict_step(const ModelConfig& config, const StepShape& step,
                            const MachineRates& rates) {
  check_modelled(config, step);
  check(rates.attention_seq == step.seq && rates.attention_head_dim == config.head_dim(),
        "rates measured for attention over {} tokens of head size {}, asked for {} and {}",
        rates.attention_seq, rates.attention_head_dim, step.seq, config.head_dim());
  const int64_t N = step.batch * step.seq;
  const bool full = step.recompute == Recompute::kFull;
  StepPrediction p;
  for (const auto& [shape, calls] : step_gemms(config, step)) {
    const auto rate = rates.gemm_flops.find(shape);
    check(rate != rates.gemm_flops.end(), "no measured rate for the gemm {}", shape.name());
    p.matmul_s += double(calls) * shape.flops() / rate->second;
  }

  const double forward = attention_flops(config, step, false) / rates.attention_forward_flops;
  const double backward = attention_flops(config, step, true) / rates.attention_backward_flops;
  p.attention_s = double(config.n_layer) * ((full ? 2 : 1) * forward + backward);

  const BlockTraffic block = block_traffic(config, N);
  double elements = outer_traffic(config, N);
  elements += double(config.n_layer) * (block.forward + block.backward);
  if (full) elements += double(config.n_layer) * block.forward;
  if (step.recompute == Recompute::kSelective) {
    elements += double(config.n_layer) * block.selective_recompute;
  }
  p.memory_bound_s = kFloat * elements / rates.activation_bandwidth;

  // AdamW reads parameter, gradient and both moments and writes all but the gradient.
  const double params = double(model::model_layout(config).params.total());
  p.optimizer_s = kFloat * params / rates.fill_bandwidth +
                  7 * kFloat * params / rates.parameter_bandwidth;
  if (rates.ranks > 1) p.communication_s = kFloat * params / rates.allreduce_bandwidth;
  p.total_s = p.matmul_s + p.attention_s + p.memory_bound_s + p.optimizer_s + p.communication_s;
  return p;
}

}  // namespace tessera::plan
