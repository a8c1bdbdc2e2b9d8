#include "tessera/plan/calibration.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/block_spec.h"
#include "tessera/model/model_layout.h"

namespace tessera::plan {

namespace {

namespace k = kernels;
using model::ModelConfig;
using model::Recompute;

constexpr double kFloat = sizeof(float);
constexpr double kAdamWBytes = 7 * kFloat;
// A measured gemm does at most this much work: its dimensions are cut down, largest first, but
// an output dimension never below kMinMeasuredRows and the summed one never below
// kMinMeasuredSum, past which these shapes' rates no longer change much with size.
constexpr double kMaxMeasuredFlops = 4e8;
constexpr int64_t kMinMeasuredRows = 1024;
constexpr int64_t kMinMeasuredSum = 2048;
// Element-wise kernels are timed over at most this many elements, which stay in cache.
constexpr int64_t kMaxSampleElements = int64_t{1} << 22;
// Bandwidths from DRAM, AdamW and gradient zeroing are timed over arrays of this many floats:
// 64 MiB each, past the caches.
constexpr int64_t kDramSample = int64_t{1} << 24;
// The trainer's default gradient bucket (dist.bucket_mb).
constexpr int64_t kAllReduceFloats = int64_t{1} << 20;
// Every call runs once to warm up, then kRounds times twice (the second run finds its operands
// in cache), or once for calls that stream from DRAM anyway.
constexpr int kRounds = 3;

bool is_gpt2(const ModelConfig& c) { return c.arch == model::Architecture::kGpt2; }

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Times calls in interleaved rounds, so that a slow spell of a shared machine spoils one round
// rather than all of a call's runs. A call's time is its fastest run. A kernel's run counts the
// lesser of its wall time and the process's CPU time: when another process takes the core from
// a one-thread run, its wall time stretches but its CPU time does not (with more threads the CPU
// time exceeds the wall time). Communication counts wall time: waiting for a peer takes no CPU.
class KernelTimer {
 public:
  enum class Work { kInCache, kFromDram, kCommunication };
  // Returns the call's id for seconds().
  size_t add(std::function<void()> call, Work work = Work::kInCache) {
    calls_.push_back({std::move(call), work});
    best_.push_back(std::numeric_limits<double>::infinity());
    return calls_.size() - 1;
  }

  void run_rounds() {
    for (const Call& c : calls_) c.run();
    for (int round = 0; round < kRounds; ++round) {
      for (size_t i = 0; i < calls_.size(); ++i) {
        const Call& c = calls_[i];
        for (int run = 0; run < (c.work == Work::kFromDram ? 1 : 2); ++run) {
          const double cpu0 = cpu_seconds();
          const auto wall0 = std::chrono::steady_clock::now();
          c.run();
          const double wall =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
          const double cpu = c.work == Work::kCommunication ? wall : cpu_seconds() - cpu0;
          best_[i] = std::min({best_[i], wall, cpu});
        }
      }
    }
  }

  double seconds(size_t id) const { return best_[id]; }

 private:
  struct Call {
    std::function<void()> run;
    Work work;
  };
  std::vector<Call> calls_;
  std::vector<double> best_;
};

// Turns the timer's results into rates once the rounds have run.
using RatesFrom = std::function<void(const KernelTimer&, MachineRates&)>;

// Uniform in [-scale, scale). Random rather than patterned values: exact cancellations would
// produce denormals, which the CPU handles far more slowly than training data.
std::vector<float> random_values(int64_t n, uint64_t stream, float scale = 1.0f) {
  const CounterRng rng(1, stream);
  std::vector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(2 * rng.uniform(i) - 1);
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of `row_elements` each to time a row-wise kernel on: the step's rows, up to the sample cap.
int64_t sample_rows(int64_t rows, int64_t row_elements) {
  return std::clamp<int64_t>(kMaxSampleElements / row_elements, 1, rows);
}

struct Linear {
  int64_t in, out;
  bool bias;
};

// The linear layers of one block, in forward order.
std::vector<Linear> block_linears(const ModelConfig& c) {
  std::vector<Linear> linears;
  for (const model::Part& p : model::block_spec(c).parts) {
    if (p.kind == model::PartKind::kLinear) linears.push_back({p.in, p.out, p.bias});
  }
  return linears;
}

// The gemms of kernels::linear_forward and linear_backward.
GemmShape forward_gemm(const Linear& l, int64_t N) { return {false, true, N, l.out, l.in, l.bias}; }
GemmShape input_grad_gemm(const Linear& l, int64_t N) {
  return {false, false, N, l.in, l.out, false};
}
GemmShape weight_grad_gemm(const Linear& l, int64_t N) {
  return {true, false, l.out, l.in, N, true};
}

GemmShape measured_shape(GemmShape s) {
  std::array<int64_t*, 3> dims = {&s.m, &s.n, &s.k};
  std::sort(dims.begin(), dims.end(), [](int64_t* a, int64_t* b) { return *a > *b; });
  for (int64_t* d : dims) {
    if (s.flops() <= kMaxMeasuredFlops) break;
    const int64_t floor = d == &s.k ? kMinMeasuredSum : kMinMeasuredRows;
    const int64_t cut = int64_t(double(*d) * kMaxMeasuredFlops / s.flops());
    *d = std::min(*d, std::max(floor, cut));
  }
  return s;
}

RatesFrom time_gemms(const ModelConfig& config, const StepShape& step, KernelTimer& timer) {
  std::map<GemmShape, GemmShape> measured;
  int64_t a_size = 0, b_size = 0, c_size = 0;
  for (const auto& [shape, calls] : step_gemms(config, step)) {
    const GemmShape m = measured_shape(shape);
    measured.emplace(shape, m);
    a_size = std::max(a_size, m.m * m.k);
    b_size = std::max(b_size, m.k * m.n);
    c_size = std::max(c_size, m.m * m.n);
  }
  struct Buffers {
    std::vector<float> a, b, c;
  };
  auto buffers = std::make_shared<Buffers>(
      Buffers{random_values(a_size, 1), random_values(b_size, 2), random_values(c_size, 3)});
  std::map<GemmShape, size_t> ids;
  for (const auto& [shape, m] : measured) {
    ids[shape] = timer.add([buffers, m] {
      const int64_t lda = m.trans_a ? m.m : m.k, ldb = m.trans_b ? m.k : m.n;
      k::gemm<float>(k::kCpuContext, m.trans_a, m.trans_b, m.m, m.n, m.k, 1.0f, buffers->a.data(),
                     lda, buffers->b.data(), ldb, m.accumulate ? 1.0f : 0.0f, buffers->c.data(),
                     m.n);
    });
  }
  return [measured, ids](const KernelTimer& t, MachineRates& rates) {
    for (const auto& [shape, m] : measured) {
      rates.gemm_flops[shape] = m.flops() / t.seconds(ids.at(shape));
    }
  };
}

// Attention is timed on the fewest sequences that give every thread a (sequence, head) task:
// a larger batch repeats the same tasks.
RatesFrom time_attention(const ModelConfig& c, const StepShape& step, KernelTimer& timer) {
  const int64_t H = c.n_head, KVH = c.kv_heads(), hd = c.head_dim(), T = step.seq;
  const StepShape timed{std::min(step.batch, ceil_div(num_threads(), KVH)), T};
  const int64_t N = timed.batch * T;
  struct Buffers {
    std::vector<float> qkv, dqkv, out, dout, lse, scratch;
  };
  auto b = std::make_shared<Buffers>();
  b->qkv = random_values(N * c.qkv_width(), 4, 0.5f);
  b->dqkv.resize(b->qkv.size());
  b->out.resize(N * H * hd);
  b->dout = random_values(N * H * hd, 5);
  b->lse.resize(N * H);
  b->scratch.resize(k::attention_scratch_size(T) * num_threads());
  const size_t forward = timer.add([=] {
    k::attention_forward(k::kCpuContext, b->qkv.data(), b->out.data(), b->lse.data(),
                         b->scratch.data(), timed.batch, T, H, KVH, hd);
  });
  const size_t backward = timer.add([=] {
    k::attention_backward(k::kCpuContext, b->dout.data(), b->qkv.data(), b->lse.data(),
                          b->dqkv.data(), b->scratch.data(), timed.batch, T, H, KVH, hd);
  });
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.attention_seq = T;
    rates.attention_head_dim = hd;
    rates.attention_forward_flops = attention_flops(c, timed, false) / t.seconds(forward);
    rates.attention_backward_flops = attention_flops(c, timed, true) / t.seconds(backward);
  };
}

RatesFrom time_mlp_activation(const ModelConfig& c, const StepShape& step, KernelTimer& timer) {
  const int64_t F = c.ffn(), rows = sample_rows(step.batch * step.seq, c.mlp_hidden_width());
  const int64_t n = rows * F;
  struct Buffers {
    std::vector<float> pre, d_pre, act, d_act;
  };
  auto b = std::make_shared<Buffers>();
  b->pre = random_values(rows * c.mlp_hidden_width(), 6, 3.0f);
  b->d_pre.resize(b->pre.size());
  b->act.resize(n);
  b->d_act = random_values(n, 7);
  size_t forward, backward;
  if (is_gpt2(c)) {
    forward = timer.add([=] { k::gelu_forward(k::kCpuContext, b->pre.data(), b->act.data(), n); });
    backward = timer.add([=] {
      k::gelu_backward(k::kCpuContext, b->d_act.data(), b->pre.data(), b->d_pre.data(), n);
    });
  } else {
    forward = timer.add(
        [=] { k::swiglu_forward(k::kCpuContext, b->pre.data(), b->act.data(), rows, F); });
    backward = timer.add([=] {
      k::swiglu_backward(k::kCpuContext, b->d_act.data(), b->pre.data(), b->d_pre.data(), rows, F);
    });
  }
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.mlp_activation_forward_rate = double(n) / t.seconds(forward);
    rates.mlp_activation_backward_rate = double(n) / t.seconds(backward);
  };
}

RatesFrom time_rope(const ModelConfig& c, const StepShape& step, KernelTimer& timer) {
  const int64_t batch = ceil_div(sample_rows(step.batch * step.seq, c.qkv_width()), step.seq);
  auto qkv =
      std::make_shared<std::vector<float>>(random_values(batch * step.seq * c.qkv_width(), 8));
  const size_t id = timer.add([=] {
    k::rope_forward(k::kCpuContext, qkv->data(), batch, step.seq, c.n_head, c.kv_heads(),
                    c.head_dim(), 0, c.rope_theta);
  });
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.rope_rate = double(batch * step.seq) / t.seconds(id);
  };
}

RatesFrom time_loss(const ModelConfig& c, const StepShape& step, KernelTimer& timer) {
  const int64_t V = c.vocab_size, rows = sample_rows(step.batch * step.seq, V);
  struct Buffers {
    std::vector<float> logits, losses;
    std::vector<int32_t> targets;
  };
  auto b = std::make_shared<Buffers>();
  b->logits = random_values(rows * V, 9, 4.0f);
  b->losses.resize(rows);
  for (int64_t r = 0; r < rows; ++r) b->targets.push_back(int32_t(r * 7919 % V));
  const size_t id = timer.add([=] {
    k::softmax_cross_entropy(k::kCpuContext, b->logits.data(), b->targets.data(), b->losses.data(),
                             rows, V, 1.0f / float(rows));
  });
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.loss_rate = double(rows * V) / t.seconds(id);
  };
}

// kernels::add over arrays that stay in cache, and over arrays larger than the caches along with
// AdamW and std::fill. Constant values: these kernels take the same time whatever the numbers.
RatesFrom time_bandwidths(KernelTimer& timer) {
  constexpr int64_t n_cached = kMaxSampleElements / 4;
  struct Buffers {
    std::vector<float> a = std::vector<float>(n_cached, 1.0f), b = a, out = a;
    std::vector<float> params = std::vector<float>(kDramSample, 0.5f);
    std::vector<float> grads = std::vector<float>(kDramSample, 1e-3f), m = grads, v = grads;
  };
  auto b = std::make_shared<Buffers>();
  const size_t cached =
      timer.add([=] { k::add(k::kCpuContext, b->a.data(), b->b.data(), b->out.data(), n_cached); });
  const auto dram = KernelTimer::Work::kFromDram;
  const size_t streaming = timer.add(
      [=] { k::add(k::kCpuContext, b->params.data(), b->grads.data(), b->m.data(), kDramSample); },
      dram);
  const size_t adamw = timer.add(
      [=] {
        const k::AdamWParams hyper{1e-4, 0.9, 0.95, 1e-8, 0.1, 1};
        k::adamw_update(k::kCpuContext, b->params.data(), b->grads.data(), b->m.data(), b->v.data(),
                        kDramSample, hyper);
      },
      dram);
  const size_t zeroing = timer.add([=] { std::fill(b->v.begin(), b->v.end(), 0.0f); }, dram);
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.cache_bandwidth = 3 * kFloat * double(n_cached) / t.seconds(cached);
    rates.activation_bandwidth = 3 * kFloat * double(kDramSample) / t.seconds(streaming);
    rates.parameter_bandwidth = kAdamWBytes * double(kDramSample) / t.seconds(adamw);
    rates.zeroing_bandwidth = kFloat * double(kDramSample) / t.seconds(zeroing);
  };
}

double allreduce_bandwidth(dist::Communicator& dp) {
  std::vector<float> bucket = random_values(kAllReduceFloats, 14);
  dp.barrier();
  KernelTimer timer;
  timer.add([&] { dp.all_reduce(bucket.data(), kAllReduceFloats, DType::f32); },
            KernelTimer::Work::kCommunication);
  timer.run_rounds();
  // Every rank must price the step alike.
  double seconds = timer.seconds(0);
  dp.all_reduce(&seconds, 1);
  return kFloat * double(kAllReduceFloats) * dp.size() / seconds;
}

void check_modelled(const ModelConfig& c, const StepShape& step) {
  check(!c.is_moe(), "the step-time model does not cover mixture-of-experts blocks");
  check(step.batch >= 1 && step.seq >= 1 && step.seq <= c.max_seq,
        "a step of batch {} x seq {} does not fit a model with max_seq {}", step.batch, step.seq,
        c.max_seq);
}

// Elements the streaming kernels of one block read plus write. Norms read their input and
// write their output; their backward reads dy and x and accumulates into dx (read and write),
// then reads dy and x again for the weight gradients. A bias is first broadcast into its
// output rows, and its gradient reads dy once.
struct BlockTraffic {
  double forward = 0, backward = 0, selective_recompute = 0;
};

BlockTraffic block_traffic(const ModelConfig& c, double N) {
  const double NC = N * double(c.d_model);
  double bias = 0;
  for (const Linear& l : block_linears(c)) bias += l.bias ? N * double(l.out) : 0;
  const double norm_forward = 2 * NC, norm_backward = 6 * NC, residual_add = 3 * NC;
  return {2 * norm_forward + 2 * residual_add + bias, 2 * norm_backward + bias, 2 * norm_forward};
}

// The same outside the blocks: embedding, final norm, and the residual gradient cleared before
// backward. GPT-2 adds a position row to each token row, and backward adds each row's gradient
// to both tables.
double outer_traffic(const ModelConfig& c, double N) {
  const double NC = N * double(c.d_model);
  const double embed_forward = is_gpt2(c) ? 3 * NC : 2 * NC;
  const double embed_backward = is_gpt2(c) ? 5 * NC : 3 * NC;
  return embed_forward + 2 * NC + NC + 6 * NC + embed_backward;
}

// Elements a gemm reads plus writes.
double gemm_traffic(const GemmShape& s) {
  return double(s.m) * double(s.k) + double(s.k) * double(s.n) +
         double(s.m) * double(s.n) * (s.accumulate ? 2 : 1);
}

}  // namespace

std::string GemmShape::name() const {
  return fmt::format("{}{} {}x{}x{}{}", trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                     accumulate ? " +C" : "");
}

std::map<GemmShape, int64_t> step_gemms(const ModelConfig& config, const StepShape& step) {
  check_modelled(config, step);
  const int64_t N = step.batch * step.seq;
  const int64_t forwards = step.recompute == Recompute::kFull ? 2 : 1;
  std::map<GemmShape, int64_t> calls;
  for (const Linear& l : block_linears(config)) {
    calls[forward_gemm(l, N)] += forwards * config.n_layer;
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
  KernelTimer timer;
  std::vector<RatesFrom> rates_from = {time_gemms(config, step, timer),
                                       time_attention(config, step, timer),
                                       time_mlp_activation(config, step, timer),
                                       time_loss(config, step, timer), time_bandwidths(timer)};
  if (!is_gpt2(config)) rates_from.push_back(time_rope(config, step, timer));
  timer.run_rounds();
  MachineRates rates;
  rates.threads = num_threads();
  for (const RatesFrom& from : rates_from) from(timer, rates);
  rates.ranks = dp.size();
  if (dp.size() > 1) rates.allreduce_bandwidth = allreduce_bandwidth(dp);
  return rates;
}

StepPrediction predict_step(const ModelConfig& config, const StepShape& step,
                            const MachineRates& rates) {
  check_modelled(config, step);
  check(rates.attention_seq == step.seq && rates.attention_head_dim == config.head_dim(),
        "the rates were measured for attention over {} tokens of head size {}, not {} and {}",
        rates.attention_seq, rates.attention_head_dim, step.seq, config.head_dim());
  const double N = double(step.batch * step.seq), L = double(config.n_layer);
  const double F = double(config.ffn());
  const double Q = double(config.qkv_width()), HD = double(config.n_head * config.head_dim());
  const double forwards = step.recompute == Recompute::kFull ? 2 : 1;
  // A kernel timed on data in cache, run on `elements` that come from DRAM.
  const double dram_penalty =
      std::max(0.0, kFloat / rates.activation_bandwidth - kFloat / rates.cache_bandwidth);
  auto in_step = [&](double seconds, double elements) { return seconds + elements * dram_penalty; };
  StepPrediction p;

  for (const auto& [shape, calls] : step_gemms(config, step)) {
    const auto rate = rates.gemm_flops.find(shape);
    check(rate != rates.gemm_flops.end(), "no measured rate for the gemm {}", shape.name());
    p.matmul_s += double(calls) * in_step(shape.flops() / rate->second, gemm_traffic(shape));
  }

  // Forward reads q, k, v and writes the output; backward reads the output's gradient and q, k,
  // v, and writes their gradients.
  const double attention_forward =
      in_step(attention_flops(config, step, false) / rates.attention_forward_flops, N * (Q + HD));
  const double attention_backward = in_step(
      attention_flops(config, step, true) / rates.attention_backward_flops, N * (2 * Q + HD));
  p.attention_s = L * (forwards * attention_forward + attention_backward);

  const BlockTraffic block = block_traffic(config, N);
  double streamed = outer_traffic(config, N) + L * (forwards * block.forward + block.backward);
  double activation_forwards = forwards;
  if (step.recompute == Recompute::kSelective) {
    streamed += L * block.selective_recompute;
    activation_forwards = 2;
  }
  // GELU reads x and writes y, and backward reads dy and x and writes dx; SwiGLU reads gate and
  // up for each output, and backward writes the gradients of both.
  const double activation_forward_elements = is_gpt2(config) ? 2 * N * F : 3 * N * F;
  const double activation_backward_elements = is_gpt2(config) ? 3 * N * F : 5 * N * F;
  const double activation =
      activation_forwards *
          in_step(N * F / rates.mlp_activation_forward_rate, activation_forward_elements) +
      in_step(N * F / rates.mlp_activation_backward_rate, activation_backward_elements);
  // The fused loss reads each logits row and overwrites it with its gradient.
  const double logits = N * double(config.vocab_size);
  p.memory_bound_s = kFloat * streamed / rates.activation_bandwidth + L * activation +
                     in_step(logits / rates.loss_rate, 2 * logits);
  if (!is_gpt2(config)) {
    // Rotary embeddings turn q and k in place, forward and backward.
    const double rotated = 2 * N * double(config.n_head + config.kv_heads()) * config.head_dim();
    p.memory_bound_s += L * (forwards + 1) * in_step(N / rates.rope_rate, rotated);
  }

  const double params = double(model::model_layout(config).params.total());
  p.optimizer_s =
      kFloat * params / rates.zeroing_bandwidth + kAdamWBytes * params / rates.parameter_bandwidth;
  if (rates.ranks > 1) p.communication_s = kFloat * params / rates.allreduce_bandwidth;
  p.total_s = p.matmul_s + p.attention_s + p.memory_bound_s + p.optimizer_s + p.communication_s;
  return p;
}

}  // namespace tessera::plan
