// What observability costs a training step, measured beside the step itself in one process: the
// built-in tiny model's forward and backward (B16 T256, as `tessera train` runs it by default),
// then what every step adds to it (recording the step: the metrics registry, its record and the
// live page's history) and what serving adds each time a client fetches /metrics, history.json
// (4096 records, the history's room) and the page. Prints each, the share of the step they take
// at one fetch of each per second, the CPU and the matmul path. bench/obs_overhead.sh runs it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/model/transformer.h"
#include "tessera/obs/live_page.h"
#include "tessera/runtime/train_step.h"
#include "tessera/train/train_metrics.h"

using namespace tessera;
using Clock = std::chrono::steady_clock;

template <typename Body>
double median_seconds(int repeats, Body&& body) {
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    body();
    s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::nth_element(s.begin(), s.begin() + s.size() / 2, s.end());
  return s[s.size() / 2];
}

int main() {
  model::ModelConfig c;  // configs/tiny.toml: a byte-level GPT-2 of 4 layers, d_model 256
  c.vocab_size = 256;
  c.n_layer = 4;
  c.n_head = 4;
  c.d_model = 256;
  c.max_seq = 256;
  const int64_t B = 16, T = 256;
  model::Transformer m(c, B, T, true);
  m.init_weights(1);
  const CounterRng rng(5, 0);
  std::vector<int32_t> tokens(2 * B * T);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t(rng.below(i, 256));
  runtime::TrainStep(m).forward_backward(tokens.data(), tokens.data() + B * T, B, T, 1.0f);
  const double step = median_seconds(5, [&] {
    runtime::TrainStep(m).forward_backward(tokens.data(), tokens.data() + B * T, B, T, 1.0f);
  });

  train::RunDescription run{.name = "bench",
                            .model = "gpt2",
                            .precision = "f32",
                            .ranks = 8,
                            .peak_flops = 1e12,
                            .peak = "bench",
                            .flops_per_token = 2e7,
                            .hardware_flops_per_token = 2e7};
  run.memory.resize(8);
  train::TrainMetrics metrics(run, std::nullopt);
  train::StepFigures f{
      .step = 1, .loss = 2.5, .lr = 1e-3, .grad_norm = 1, .tokens = B * T, .step_seconds = step};
  f.rank_step_seconds.assign(8, step);
  f.rank_resident_bytes.assign(8, 1e9);
  constexpr int kSteps = 4096;
  const auto start = Clock::now();
  for (int i = 0; i < kSteps; ++i) {
    f.step = i + 1;
    metrics.step(f);
  }
  const double record = std::chrono::duration<double>(Clock::now() - start).count() / kSteps;
  size_t bytes = 0;
  const double scrape = median_seconds(21, [&] {
    bytes = metrics.prometheus().size() + metrics.history_json().size() + obs::live_page().size();
  });

  std::printf("tiny model B%lld T%lld, %d threads: forward and backward %.1f ms a step\n",
              static_cast<long long>(B), static_cast<long long>(T), num_threads(), 1e3 * step);
  std::printf("recording a step (8 ranks): %.1f us = %.4f%% of the step\n", 1e6 * record,
              100 * record / step);
  std::printf(
      "one fetch of /metrics, history.json and the page (%zu bytes): %.2f ms = %.3f%% of "
      "a second\n",
      bytes, 1e3 * scrape, 100 * scrape);
  std::printf("at one fetch a second: %.3f%% of the machine's time beside the step's own %.4f%%\n",
              100 * scrape, 100 * record / step);
  return 0;
}
