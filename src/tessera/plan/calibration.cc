#include "tessera/plan/calibration.h"

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/huge_pages.h"
#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"
#include "tessera/plan/kernel_timer.h"

namespace tessera::plan {

namespace {

namespace k = kernels;
using model::ModelConfig;
using model::Recompute;

constexpr double kAdamWBytes = 7 * kFloatBytes;
// A measured gemm does at most this much work: its dimensions are cut down, largest first, but
// an output dimension never below kMinMeasuredRows and the summed one never below
// kMinMeasuredSum, past which these shapes' rates no longer change much with size.
constexpr double kMaxMeasuredFlops = 4e8;
constexpr int64_t kMinMeasuredRows = 1024;
constexpr int64_t kMinMeasuredSum = 2048;
// Element-wise kernels are timed over at most this many elements, which stay in cache.
constexpr int64_t kMaxSampleElements = int64_t{1} << 22;
// Bandwidths from DRAM, AdamW, gradient zeroing and casts are timed over arrays of this many
// elements: 64 MiB of floats each, past the caches.
constexpr int64_t kDramSample = int64_t{1} << 24;
// The trainer's default gradient bucket (dist.bucket_mb).
constexpr int64_t kAllReduceBytes = int64_t{4} << 20;

bool is_gpt2(const ModelConfig& c) { return c.arch == model::Architecture::kGpt2; }

// Turns the timer's results into rates once the rounds have run.
using RatesFrom = std::function<void(const KernelTimer&, MachineRates&)>;

// Uniform in [-scale, scale). Random rather than patterned values: exact cancellations would
// produce denormals, which the CPU handles far more slowly than training data.
LargeVector<float> random_values(int64_t n, uint64_t stream, float scale = 1.0f) {
  const CounterRng rng(1, stream);
  LargeVector<float> v(size_t(std::max<int64_t>(n, 1)));
  for (size_t i = 0; i < v.size(); ++i) v[i] = scale * float(2 * rng.uniform(i) - 1);
  return v;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows of `row_elements` each to time a row-wise kernel on: the step's rows, up to the sample cap.
int64_t sample_rows(int64_t rows, int64_t row_elements) {
  return std::clamp<int64_t>(kMaxSampleElements / row_elements, 1, rows);
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

// Each gemm shape in its operands' format: kernels::gemm in f32, kernels::gemm_low in bf16 or f16.
// A gemm that accumulates reads C, which a step finds in DRAM (the bias broadcast into it, or the
// gradient it adds to, left the cache long before), and oneDNN's bf16 kernels read it slowly
// enough to lose a third of their speed: such gemms take their output in turn from an array
// larger than the caches. A and B stay in cache, as the other gemms' operands do.
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
    LargeVector<float> a, b, c;
    LargeVector<uint16_t> a_low, b_low;
    int64_t next_c = 0;  // where the next accumulating gemm's output starts in c
  };
  auto buffers = std::make_shared<Buffers>();
  buffers->a = random_values(a_size, 1);
  buffers->b = random_values(b_size, 2);
  buffers->c.assign(size_t(std::max(kDramSample, 2 * c_size)), 0.5f);
  if (step.precision != model::Precision::kF32) {
    const k::LowPrecision low = model::low_precision_of(step.precision);
    buffers->a_low.resize(buffers->a.size());
    buffers->b_low.resize(buffers->b.size());
    k::cast_to_low(k::kCpuContext, buffers->a.data(), buffers->a_low.data(), a_size, low);
    k::cast_to_low(k::kCpuContext, buffers->b.data(), buffers->b_low.data(), b_size, low);
  }
  std::map<GemmShape, size_t> ids;
  for (const auto& [shape, m] : measured) {
    ids[shape] = timer.add([buffers, m = m] {
      float* c = buffers->c.data();
      if (m.accumulate) {
        int64_t& next = buffers->next_c;
        if (next + m.m * m.n > int64_t(buffers->c.size())) next = 0;
        c += next;
        next += m.m * m.n;
      }
      const int64_t lda = m.trans_a ? m.m : m.k, ldb = m.trans_b ? m.k : m.n;
      const float beta = m.accumulate ? 1.0f : 0.0f;
      if (m.operands == model::Precision::kF32) {
        k::gemm<float>(k::kCpuContext, m.trans_a, m.trans_b, m.m, m.n, m.k, 1.0f, buffers->a.data(),
                       lda, buffers->b.data(), ldb, beta, c, m.n);
      } else {
        k::gemm_low(k::kCpuContext, m.trans_a, m.trans_b, m.m, m.n, m.k, 1.0f,
                    buffers->a_low.data(), lda, buffers->b_low.data(), ldb, beta, c, m.n,
                    model::low_precision_of(m.operands));
      }
    });
  }
  return [measured, ids](const KernelTimer& t, MachineRates& rates) {
    for (const auto& [shape, m] : measured) {
      rates.gemm_flops[shape] = m.flops() / t.seconds(ids.at(shape));
    }
  };
}

// Bytes a timed gemm found in cache that the step's call fetches from DRAM: A and B, and C unless
// the gemm accumulates, when its timing read C from DRAM already.
double gemm_bytes_from_dram(const GemmShape& s) {
  const double operand = s.operands == model::Precision::kF32 ? kFloatBytes : 2;
  const double c = s.accumulate ? 0 : kFloatBytes * double(s.m) * double(s.n);
  return operand * (double(s.m) * double(s.k) + double(s.k) * double(s.n)) + c;
}

// Attention is timed on the fewest sequences that give every thread a (sequence, head) task:
// a larger batch repeats the same tasks.
RatesFrom time_attention(const ModelConfig& c, const StepShape& step, KernelTimer& timer) {
  const int64_t H = c.n_head, KVH = c.kv_heads(), hd = c.head_dim(), T = step.seq;
  const StepShape timed{std::min(step.batch, ceil_div(num_threads(), KVH)), T};
  const int64_t N = timed.batch * T;
  struct Buffers {
    LargeVector<float> qkv, dqkv, out, dout, lse, scratch;
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
    LargeVector<float> pre, d_pre, act, d_act;
  };
  auto b = std::make_shared<Buffers>();
  b->pre = random_values(rows * c.mlp_hidden_width(), 6, 3.0f);
  b->d_pre.resize(b->pre.size());
  b->act.resize(n);
  b->d_act = random_values(n, 7);
  size_t forward, backward;
  // A mixture of experts' experts are SwiGLU MLPs whatever the architecture.
  if (is_gpt2(c) && !c.is_moe()) {
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
      std::make_shared<LargeVector<float>>(random_values(batch * step.seq * c.qkv_width(), 8));
  const size_t id = timer.add([=] {
    k::rope_forward(k::kCpuContext, qkv->data(), batch, step.seq, c.n_head, c.kv_heads(),
                    c.head_dim(), 0, c.rope());
  });
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.rope_rate = double(batch * step.seq) / t.seconds(id);
  };
}

RatesFrom time_loss(const ModelConfig& c, const StepShape& step, KernelTimer& timer) {
  const int64_t V = c.vocab_size, rows = sample_rows(step.batch * step.seq, V);
  struct Buffers {
    LargeVector<float> logits, losses;
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
// AdamW and the gradient clearing. Constant values: these kernels take the same time whatever the
// numbers.
RatesFrom time_bandwidths(KernelTimer& timer) {
  constexpr int64_t n_cached = kMaxSampleElements / 4;
  struct Buffers {
    LargeVector<float> a = LargeVector<float>(n_cached, 1.0f), b = a, out = a;
    LargeVector<float> params = LargeVector<float>(kDramSample, 0.5f);
    LargeVector<float> grads = LargeVector<float>(kDramSample, 1e-3f), m = grads, v = grads;
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
  const size_t zeroing = timer.add(
      [=] { k::fill_zeros(k::kCpuContext, b->v.data(), sizeof(float) * b->v.size()); }, dram);
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.cache_bandwidth = 3 * kFloatBytes * double(n_cached) / t.seconds(cached);
    rates.activation_bandwidth = 3 * kFloatBytes * double(kDramSample) / t.seconds(streaming);
    rates.parameter_bandwidth = kAdamWBytes * double(kDramSample) / t.seconds(adamw);
    rates.zeroing_bandwidth = kFloatBytes * double(kDramSample) / t.seconds(zeroing);
  };
}

// Low precision: both casts over arrays larger than the caches.
RatesFrom time_casts(const StepShape& step, KernelTimer& timer) {
  if (step.precision == model::Precision::kF32) return [](const KernelTimer&, MachineRates&) {};
  const k::LowPrecision low = model::low_precision_of(step.precision);
  struct Buffers {
    LargeVector<float> f32 = LargeVector<float>(kDramSample, 0.5f);
    LargeVector<uint16_t> low = LargeVector<uint16_t>(kDramSample);
  };
  auto b = std::make_shared<Buffers>();
  const auto dram = KernelTimer::Work::kFromDram;
  const size_t narrow = timer.add(
      [=] { k::cast_to_low(k::kCpuContext, b->f32.data(), b->low.data(), kDramSample, low); },
      dram);
  const size_t widen = timer.add(
      [=] { k::cast_from_low(k::kCpuContext, b->low.data(), b->f32.data(), kDramSample, low); },
      dram);
  return [=](const KernelTimer& t, MachineRates& rates) {
    rates.narrow_rate = double(kDramSample) / t.seconds(narrow);
    rates.widen_rate = double(kDramSample) / t.seconds(widen);
  };
}

// Bytes/s of an all-reduce of one gradient bucket in the format the parameter store keeps
// gradients in: bf16 in a bf16 step, else f32.
double allreduce_bandwidth(comm::Communicator& dp, const StepShape& step) {
  const DType dtype = step.precision == model::Precision::kBf16 ? DType::bf16 : DType::f32;
  const int64_t n = kAllReduceBytes / int64_t(dtype_size(dtype));
  LargeVector<float> values = random_values(n, 14);
  LargeVector<uint16_t> halves(static_cast<size_t>(n));
  if (dtype == DType::bf16) {
    k::cast_to_low(k::kCpuContext, values.data(), halves.data(), n, k::LowPrecision::kBf16);
  }
  void* bucket = dtype == DType::bf16 ? static_cast<void*>(halves.data()) : values.data();
  dp.barrier();
  KernelTimer timer;
  timer.add([&] { dp.all_reduce(bucket, n, dtype); }, KernelTimer::Work::kCommunication);
  timer.run_rounds();
  // Every rank must price the step alike.
  double seconds = timer.seconds(0);
  dp.all_reduce(&seconds, 1);
  return double(kAllReduceBytes) * dp.size() / seconds;
}

}  // namespace

MachineRates measure_machine(const ModelConfig& config, const StepShape& step,
                             comm::Communicator& dp) {
  check_modelled(config, step);
  KernelTimer timer;
  std::vector<RatesFrom> rates_from = {time_gemms(config, step, timer),
                                       time_attention(config, step, timer),
                                       time_mlp_activation(config, step, timer),
                                       time_loss(config, step, timer),
                                       time_bandwidths(timer),
                                       time_casts(step, timer)};
  if (!is_gpt2(config)) rates_from.push_back(time_rope(config, step, timer));
  timer.run_rounds();
  MachineRates rates;
  rates.threads = num_threads();
  rates.precision = step.precision;
  for (const RatesFrom& from : rates_from) from(timer, rates);
  rates.ranks = dp.size();
  if (dp.size() > 1) rates.allreduce_bandwidth = allreduce_bandwidth(dp, step);
  return rates;
}

StepPrediction predict_step(const ModelConfig& config, const StepShape& step,
                            const MachineRates& rates) {
  check_modelled(config, step);
  check(rates.attention_seq == step.seq && rates.attention_head_dim == config.head_dim(),
        "the rates were measured for attention over {} tokens of head size {}, not {} and {}",
        rates.attention_seq, rates.attention_head_dim, step.seq, config.head_dim());
  check(rates.precision == step.precision,
        "the rates were measured for a step in {}, not {}: measure the machine for this precision",
        enum_name(rates.precision), enum_name(step.precision));
  const double N = double(step.batch * step.seq), L = double(config.n_layer);
  const double Q = double(config.qkv_width()), HD = double(config.n_head * config.head_dim());
  const double forwards = step.recompute == Recompute::kFull ? 2 : 1;
  // A kernel timed on data in cache, run on `bytes` that come from DRAM.
  const double dram_penalty =
      std::max(0.0, 1 / rates.activation_bandwidth - 1 / rates.cache_bandwidth);
  auto in_step = [&](double seconds, double bytes) { return seconds + bytes * dram_penalty; };
  StepPrediction p;

  for (const auto& [shape, calls] : step_gemms(config, step)) {
    const auto rate = rates.gemm_flops.find(shape);
    check(rate != rates.gemm_flops.end(), "no measured rate for the gemm {}", shape.name());
    p.matmul_s +=
        double(calls) * in_step(shape.flops() / rate->second, gemm_bytes_from_dram(shape));
  }

  // Forward reads q, k, v and writes the output; backward reads the output's gradient and q, k,
  // v, and writes their gradients.
  const double attention_forward =
      in_step(attention_flops(config, step, false) / rates.attention_forward_flops,
              kFloatBytes * N * (Q + HD));
  const double attention_backward =
      in_step(attention_flops(config, step, true) / rates.attention_backward_flops,
              kFloatBytes * N * (2 * Q + HD));
  p.attention_s = L * (forwards * attention_forward + attention_backward);

  const StepElements w = step_elements(config, step);
  p.memory_bound_s =
      kFloatBytes * w.streamed / rates.activation_bandwidth +
      in_step(w.activation_forward / rates.mlp_activation_forward_rate,
              kFloatBytes * w.activation_forward_moved) +
      in_step(w.activation_backward / rates.mlp_activation_backward_rate,
              kFloatBytes * w.activation_backward_moved) +
      in_step(w.logits / rates.loss_rate, kFloatBytes * 2 * w.logits) +
      // The router's per-token softmax and top-k, priced as the loss's softmax per element.
      in_step(w.router_probabilities / rates.loss_rate, kFloatBytes * 2 * w.router_probabilities);
  if (w.rope_rows > 0) {
    p.memory_bound_s += in_step(w.rope_rows / rates.rope_rate, kFloatBytes * w.rope_moved);
  }
  if (step.precision != model::Precision::kF32) {
    p.casts_s = w.narrowed / rates.narrow_rate + w.widened / rates.widen_rate;
  }
  p.optimizer_s = w.zeroed_bytes / rates.zeroing_bandwidth +
                  kAdamWBytes * w.updated_parameters / rates.parameter_bandwidth;
  if (rates.ranks > 1) {
    // The all-reduce sums the gradients in the format the store keeps them: bf16 or f32.
    const double gradient = step.precision == model::Precision::kBf16 ? 2 : kFloatBytes;
    p.communication_s = gradient * w.updated_parameters / rates.allreduce_bandwidth;
  }
  p.total_s =
      p.matmul_s + p.attention_s + p.memory_bound_s + p.casts_s + p.optimizer_s + p.communication_s;
  return p;
}

}  // namespace tessera::plan
