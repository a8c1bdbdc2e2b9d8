// Batch-1 decoding as the server runs it: a model read from a run config (configs/gpt2-124m.toml
// by default) with random weights, or a run's checkpoint (--checkpoint), a short prompt
// prefilled through the paged KV cache, then --steps single-token steps, each feeding back the
// greedy token. Every weight format runs in the same process, alternating, --repeats times after
// a warm-up; each keeps its best and median tokens/s of the decode steps (that prefill is not
// timed). With --prefill N each round also times one N-token prompt prefilled in one chunk.
// --kv-dtype q8_0 holds the KV cache in q8_0 blocks instead of f32.
//
// Decoding one token reads every matmul weight once, so memory bandwidth bounds it: the bench
// also measures the read bandwidth with the same threads, over buffers far larger than the caches
// (bench/machine_limits.h), and prints each format's bound, bandwidth / weight bytes per token, and
// how close it came. With --profile 1, one more decode run of each format records where a token's
// time goes by class of kernel (kernels/op_profile.h), and the rate the matmuls read their weights
// at. One 'RESULT {...}' line last.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "machine_limits.h"
#include "tessera/ckpt/checkpoint.h"
#include "tessera/ckpt/state_reader.h"
#include "tessera/core/config.h"
#include "tessera/core/error.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/model/transformer.h"
#include "tessera/runtime/decoder.h"
#include "tessera/serve/kv_cache.h"
#include "tessera/train/run_config.h"

using namespace tessera;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Format {
  std::string name;
  model::ModelOptions options;
};

Format format_named(const std::string& name) {
  if (name == "int8" || name == "q4_0" || name == "q4_k") {
    return {name, {.weights = enum_from_name<model::WeightFormat>(name, "format")}};
  }
  return {name, {.precision = enum_from_name<model::Precision>(name, "format")}};
}

// One format's model and cache, and the tokens/s of each timed run.
struct Runner {
  Format format;
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<runtime::Decoder> decoder;
  std::unique_ptr<serve::PagedKvCache> cache;
  std::vector<double> tokens_per_s;

  // Prefills the prompt, then decodes `steps` tokens one at a time; returns their tokens/s.
  double run(const std::vector<int32_t>& prompt, int64_t steps) {
    const int64_t V = model->config().vocab_size;
    const int64_t seq = cache->add_sequence();
    std::vector<int32_t> tokens = prompt;
    tokens.reserve(prompt.size() + steps);
    auto step = [&](int64_t n) {
      const std::span<const int32_t> fresh(tokens.end() - n, tokens.end());
      cache->reserve(seq, n);
      const runtime::DecodeChunk chunk = cache->chunk(seq, fresh);
      const float* logits = decoder->decode(cache->view(), {&chunk, 1});
      cache->advance(seq, fresh);
      tokens.push_back(int32_t(std::max_element(logits, logits + V) - logits));
    };
    step(int64_t(prompt.size()));
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) step(1);
    const double elapsed = seconds_since(t0);
    cache->release(seq);
    return double(steps) / elapsed;
  }

  // Prefills `prompt` in one chunk, as the server's first step of a request does; returns its
  // tokens/s.
  double prefill(const std::vector<int32_t>& prompt) {
    const int64_t seq = cache->add_sequence();
    const auto t0 = Clock::now();
    cache->reserve(seq, int64_t(prompt.size()));
    const runtime::DecodeChunk chunk = cache->chunk(seq, prompt);
    decoder->decode(cache->view(), {&chunk, 1});
    const double elapsed = seconds_since(t0);
    cache->release(seq);
    return double(prompt.size()) / elapsed;
  }
  std::vector<double> prefill_tokens_per_s;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct BenchOptions {
  std::string config_path = "configs/gpt2-124m.toml", formats = "f32,bf16,int8", checkpoint;
  int64_t prompt_tokens = 8, steps = 128, repeats = 5, prefill_tokens = 0;
  bool profile = false;
  kernels::KvDtype kv_dtype = kernels::KvDtype::kF32;
};

BenchOptions parse_flags(int argc, char** argv) {
  BenchOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") {
      o.config_path = v;
    } else if (k == "--checkpoint") {
      o.checkpoint = v;
    } else if (k == "--prefill") {
      o.prefill_tokens = std::stoll(v);
    } else if (k == "--formats") {
      o.formats = v;
    } else if (k == "--prompt") {
      o.prompt_tokens = std::stoll(v);
    } else if (k == "--steps") {
      o.steps = std::stoll(v);
    } else if (k == "--repeats") {
      o.repeats = std::stoll(v);
    } else if (k == "--threads") {
      set_num_threads(std::stoi(v));
    } else if (k == "--profile") {
      o.profile = std::stoi(v) != 0;
    } else if (k == "--kv-dtype") {
      o.kv_dtype = enum_from_name<kernels::KvDtype>(v, "--kv-dtype");
    } else {
      fail(
          "unknown flag {} (--config --checkpoint --formats --prompt --steps --prefill --repeats "
          "--threads --profile --kv-dtype)",
          k);
    }
  }
  return o;
}

// The model of --config with no weights (random ones are drawn), or --checkpoint's.
ckpt::CheckpointParams load_weights(BenchOptions& o) {
  ckpt::CheckpointParams weights;
  if (o.checkpoint.empty()) {
    Config config(train::run_config_schema());
    config.load_file(o.config_path);
    weights.config = train::run_config_from(config).model;
    return weights;
  }
  const std::filesystem::path step = ckpt::checkpoint_step_dir(o.checkpoint);
  o.config_path = o.checkpoint;
  return ckpt::read_checkpoint_params(step, ckpt::read_manifest(step));
}

// One warmed-up runner per format of --formats.
std::vector<Runner> make_runners(const BenchOptions& o, const ckpt::CheckpointParams& weights,
                                 int64_t context, const std::vector<int32_t>& prompt) {
  const model::ModelConfig& mc = weights.config;
  std::vector<Runner> runners;
  size_t comma = 0;
  for (size_t begin = 0; begin <= o.formats.size(); begin = comma + 1) {
    comma = std::min(o.formats.find(',', begin), o.formats.size());
    Runner r;
    r.format = format_named(o.formats.substr(begin, comma - begin));
    r.model =
        std::make_unique<model::Transformer>(mc, 1, context, /*training=*/false, r.format.options);
    if (weights.params.empty()) {
      r.model->init_weights(1337);
    } else {
      std::copy(weights.params.begin(), weights.params.end(), r.model->params().begin());
    }
    r.decoder = std::make_unique<runtime::Decoder>(*r.model);
    r.cache = std::make_unique<serve::PagedKvCache>(
        kernels::kCpuContext, r.model->model_layout(), context,
        serve::PagedKvCache::kDefaultBlockTokens, /*prefix_caching=*/false, o.kv_dtype);
    r.run(prompt, o.steps);  // warm-up: quantises or casts the weights, touches every page
    runners.push_back(std::move(r));
  }
  return runners;
}

// Each format's best and median against its bandwidth bound, as a table and in `result`.
void report(const BenchOptions& o, const std::vector<Runner>& runners,
            const bench::MachineLimits& limits, nlohmann::json& result) {
  const double bandwidth = limits.read_bandwidth;
  std::printf(
      "read bandwidth %.1f GB/s, copy %.1f GB/s (bytes read + written per second), %d threads\n",
      bandwidth / 1e9, limits.copy_bandwidth / 1e9, num_threads());
  std::printf("batch-1 decode, %s, %ld-token prompt then %ld steps, best and median of %ld\n",
              o.config_path.c_str(), long(o.prompt_tokens), long(o.steps), long(o.repeats));
  std::printf("%-6s %10s %10s %14s %12s %11s %14s\n", "format", "tok/s", "median", "weight MB/tok",
              "bound tok/s", "% of bound", "params MB");
  for (const Runner& r : runners) {
    const double best = *std::max_element(r.tokens_per_s.begin(), r.tokens_per_s.end());
    const double weight_bytes = double(r.model->matmul_weight_bytes_per_token());
    const double bound = bandwidth / weight_bytes;
    std::printf("%-6s %10.1f %10.1f %14.1f %12.1f %10.0f%% %14.1f\n", r.format.name.c_str(), best,
                median(r.tokens_per_s), weight_bytes / 1e6, bound, 100 * best / bound,
                double(r.model->resident_parameter_bytes()) / 1e6);
    result["formats"][r.format.name] = {
        {"tokens_per_s", best},
        {"tokens_per_s_median", median(r.tokens_per_s)},
        {"weight_bytes_per_token", weight_bytes},
        {"bound_tokens_per_s", bound},
        {"fraction_of_bound", best / bound},
        {"resident_parameter_bytes", r.model->resident_parameter_bytes()}};
    if (o.prefill_tokens > 0) {
      const double prefill =
          *std::max_element(r.prefill_tokens_per_s.begin(), r.prefill_tokens_per_s.end());
      std::printf("%-6s prefill of %ld tokens: %.1f tok/s (best of %ld)\n", r.format.name.c_str(),
                  long(o.prefill_tokens), prefill, long(o.repeats));
      result["formats"][r.format.name]["prefill_tokens_per_s"] = prefill;
    }
  }
}

// One more decode run of each format, its time per token split by class of kernel.
void profile_runs(const BenchOptions& o, std::vector<Runner>& runners,
                  const std::vector<int32_t>& prompt, double bandwidth, nlohmann::json& result) {
  std::printf(
      "one more run of each format: ms per decoded token by class of kernel, the prompt's "
      "prefill (about one step's weight reads) spread over the %ld steps\n",
      long(o.steps));
  const double steps = double(o.steps);
  for (Runner& r : runners) {
    kernels::start_op_profile();
    const auto t0 = Clock::now();
    r.run(prompt, o.steps);
    const double token_s = seconds_since(t0) / steps;
    const kernels::OpProfile ops = kernels::stop_op_profile();
    nlohmann::json classes = nlohmann::json::object();
    double counted = 0;
    std::printf("%-6s %.3f ms:", r.format.name.c_str(), 1e3 * token_s);
    for (int c = 0; c < kernels::kOpClasses; ++c) {
      const double s = ops[c].seconds / steps;
      if (ops[c].calls == 0) continue;
      counted += s;
      const std::string name(kernels::op_class_name(kernels::OpClass(c)));
      classes[name] = {{"seconds", s}, {"calls", double(ops[c].calls) / steps}};
      std::printf(" %s %.3f (%.0f calls)", name.c_str(), 1e3 * s, double(ops[c].calls) / steps);
    }
    const double matmul_s = ops[int(kernels::OpClass::kMatmul)].seconds / steps;
    const double read_rate = double(r.model->matmul_weight_bytes_per_token()) / matmul_s;
    std::printf(", other %.3f; matmuls read weights at %.1f GB/s (%.0f%% of read bandwidth)\n",
                1e3 * (token_s - counted), read_rate / 1e9, 100 * read_rate / bandwidth);
    result["formats"][r.format.name]["profile"] = classes;
    result["formats"][r.format.name]["matmul_weight_read_rate"] = read_rate;
  }
}

int run(int argc, char** argv) {
  BenchOptions o = parse_flags(argc, argv);
  const ckpt::CheckpointParams weights = load_weights(o);
  const int64_t context = std::max(o.prompt_tokens + o.steps, o.prefill_tokens);
  auto tokens = [vocab = weights.config.vocab_size](int64_t n) {
    std::vector<int32_t> t(n);
    for (int64_t i = 0; i < n; ++i) t[i] = int32_t((1000 * i + 13) % vocab);
    return t;
  };
  const std::vector<int32_t> prompt = tokens(o.prompt_tokens);
  const std::vector<int32_t> long_prompt = tokens(o.prefill_tokens);
  std::vector<Runner> runners = make_runners(o, weights, context, prompt);
  // The machine's bandwidth varies with what else runs on it: it is measured in every round,
  // between the formats' runs, and like them keeps its best.
  bench::MachineLimits limits;
  for (int64_t rep = 0; rep < o.repeats; ++rep) {
    bench::measure_bandwidth(limits);
    for (Runner& r : runners) {
      r.tokens_per_s.push_back(r.run(prompt, o.steps));
      if (o.prefill_tokens > 0) r.prefill_tokens_per_s.push_back(r.prefill(long_prompt));
    }
  }
  nlohmann::json result = {{"config", o.config_path},
                           {"threads", num_threads()},
                           {"prompt", o.prompt_tokens},
                           {"steps", o.steps},
                           {"repeats", o.repeats},
                           {"limits", limits.json()},
                           {"prefill", o.prefill_tokens},
                           {"formats", nlohmann::json::object()},
                           {"parameters", model::count_parameters(weights.config).total}};
  report(o, runners, limits, result);
  if (o.profile) profile_runs(o, runners, prompt, limits.read_bandwidth, result);
  std::printf("RESULT %s\n", result.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
