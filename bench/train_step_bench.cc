// Times full training steps (forward, backward, AdamW) of a GPT-2 shape on random tokens, the
// same work torch_gpt.py --mode train does, and prints one 'RESULT {...}' JSON line.
// The step runs through the trainer's ZeRO state (--zero 0..3, default 0). Under mpirun each rank
// trains its own batch, and --comm chooses how gradients are averaged: none (each rank alone, no
// communication: the baseline), overlap (stages 0 and 1 reduce buckets while backward runs, as
// the trainer does) or after (stages 0 and 1 reduce every bucket once backward has finished).
// Stages 2 and 3 reduce-scatter each block's gradients as backward finishes it either way.
// --tp N splits the model over N tensor-parallel ranks of the job (the rest are data parallel;
// --sp 1 adds sequence parallelism); the result then holds the seconds per step the model's
// tensor-parallel collectives took (model_comm_ms_mean). --probe-allreduce BYTES instead times
// all-reduces of that many f32 bytes over the job and prints their mean seconds. --device cuda
// trains on each rank's CUDA device (its local rank's) and adds the MFU over the device's dense
// bf16 peak.
// --profile 1 adds the op profile of the timed steps (seconds, FLOPs and bytes per step of each
// class of kernel: kernels/op_profile.h) and --limits 1 the machine's matmul rates and memory
// bandwidth measured in the same run (bench/machine_limits.h), with the run's model FLOPs/s as a
// share of the matmul rate in its precision. --kv-heads and --ffn shape Llama models.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "machine_limits.h"
#include "tessera/comm/mesh.h"
#include "tessera/comm/single_communicator.h"
#include "tessera/comm/world.h"
#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/model/flops.h"
#include "tessera/model/transformer.h"
#include "tessera/parallel/model_parallel.h"
#include "tessera/train/train_state.h"

using namespace tessera;

int main(int argc, char** argv) {
  comm::Communicator& world = comm::init_world(argc, argv);
  std::string comm = "overlap", device = "cpu";
  double bucket_mb = 4;
  model::ModelConfig mc;
  mc.vocab_size = 50257;
  mc.max_seq = 1024;
  model::ModelOptions options;
  int64_t B = 8, T = 256, warmup = 3, steps = 10, zero = 0, tp = 1, sp = 0, probe_bytes = 0;
  bool profile = false, limits = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--precision") {
      options.precision = model::precision_from_name(argv[i + 1]);
      continue;
    }
    if (k == "--recompute") {
      options.recompute = model::recompute_from_name(argv[i + 1]);
      continue;
    }
    if (k == "--comm") {
      comm = argv[i + 1];
      continue;
    }
    if (k == "--device") {
      device = argv[i + 1];
      continue;
    }
    if (k == "--bucket-mb") {
      bucket_mb = std::stod(argv[i + 1]);
      continue;
    }
    if (k == "--arch") {
      mc.arch = model::architecture_from_name(argv[i + 1]);
      mc.tie_embeddings = mc.arch == model::Architecture::kGpt2;
      continue;
    }
    int64_t v = std::stoll(argv[i + 1]);
    if (k == "--n-layer")
      mc.n_layer = v;
    else if (k == "--n-head")
      mc.n_head = v;
    else if (k == "--kv-heads")
      mc.n_kv_head = v;
    else if (k == "--ffn")
      mc.ffn_hidden = v;
    else if (k == "--profile")
      profile = v != 0;
    else if (k == "--limits")
      limits = v != 0;
    else if (k == "--d-model")
      mc.d_model = v;
    else if (k == "--vocab")
      mc.vocab_size = v;
    else if (k == "--batch")
      B = v;
    else if (k == "--seq")
      T = v;
    else if (k == "--steps")
      steps = v;
    else if (k == "--warmup")
      warmup = v;
    else if (k == "--zero")
      zero = v;
    else if (k == "--tp")
      tp = v;
    else if (k == "--sp")
      sp = v;
    else if (k == "--probe-allreduce")
      probe_bytes = v;
    else if (k == "--threads")
      set_num_threads(int(v));
    else {
      std::fprintf(stderr, "unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (comm != "none" && comm != "overlap" && comm != "after") {
    std::fprintf(stderr, "--comm must be none, overlap or after, got %s\n", comm.c_str());
    return 2;
  }
  if (probe_bytes > 0) {
    std::vector<float> buffer(size_t(probe_bytes / 4), 1.0f);
    for (int i = 0; i < 3; ++i) world.all_reduce(buffer.data(), int64_t(buffer.size()), DType::f32);
    const int repeats = 20;
    world.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) {
      world.all_reduce(buffer.data(), int64_t(buffer.size()), DType::f32);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const nlohmann::json r = {
        {"bytes", probe_bytes}, {"ranks", world.size()}, {"allreduce_s_mean", s / repeats}};
    if (world.rank() == 0) std::printf("RESULT %s\n", r.dump().c_str());
    return 0;
  }
  if (device != "cpu" && device != "cuda") {
    std::fprintf(stderr, "--device must be cpu or cuda, got %s\n", device.c_str());
    return 2;
  }
  const kernels::DeviceContext on(
      device == "cpu"
          ? kernels::Device{}
          : kernels::Device{kernels::DeviceKind::kCuda,
                            comm::local_rank() % std::max(1, kernels::cuda_device_count())});
  const kernels::Context& ctx = on.context();
  train::TrainConfig tc;
  tc.weight_decay = 0.0;
  tc.beta2 = 0.999;
  tc.precision = options.precision;
  comm::SingleCommunicator alone;
  comm::Communicator& ranks = comm == "none" ? alone : world;
  const comm::Mesh mesh(ranks, {.dp = ranks.size() / tp, .tp = tp, .sequence_parallel = sp != 0});
  const parallel::ModelGroups groups(mesh, mc, sp != 0);
  comm::Communicator& dp = mesh.dp();
  tc.zero = zero;
  train::TrainState state(ctx, mc, tc, mesh, groups.parallel().sharding,
                          int64_t(bucket_mb * 1024 * 1024));
  options.context = &ctx;
  options.store = &state.store();
  options.parallel = &groups.parallel();
  model::Transformer model(mc, B, T, true, options);
  state.init(1337);
  CounterRng rng(42, 0);
  std::vector<int32_t> pool(64 * (T + 1));
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = int32_t(rng.below(i, mc.vocab_size));
  std::vector<int32_t> x(B * T), y(B * T);
  double total = 0, optimizer_total = 0, model_comm_total = 0, first_loss = 0, last_loss = 0;
  for (int64_t step = 0; step < warmup + steps; ++step) {
    if (profile && step == warmup) kernels::start_op_profile();
    for (int64_t b = 0; b < B; ++b) {
      const int32_t* row = pool.data() + ((step * B + b) % 64) * (T + 1);
      std::copy(row, row + T, x.data() + b * T);
      std::copy(row + 1, row + T + 1, y.data() + b * T);
    }
    auto t0 = std::chrono::steady_clock::now();
    const double comm0 = groups.communication_seconds();
    state.zero_grad();
    state.begin_micro_step(comm == "overlap");
    float loss = model.forward_backward(x.data(), y.data(), B, T, 1.0f / float(dp.size()));
    state.reduce_gradients();
    kernels::synchronize(ctx);
    auto t1 = std::chrono::steady_clock::now();
    state.update(3e-4, 1.0f);
    kernels::synchronize(ctx);
    auto t2 = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(t2 - t0).count();
    if (step >= warmup) optimizer_total += std::chrono::duration<double>(t2 - t1).count();
    if (step == 0) first_loss = loss;
    last_loss = loss;
    if (step >= warmup) total += dt;
    if (step >= warmup) model_comm_total += groups.communication_seconds() - comm0;
  }
  const kernels::OpProfile ops = profile ? kernels::stop_op_profile() : kernels::OpProfile{};
  const double mean = total / steps;
  const double model_flops = model::flops_per_token(mc, T, options.recompute).model;
  nlohmann::json r = {{"B", B},
                      {"T", T},
                      {"n_layer", mc.n_layer},
                      {"d_model", mc.d_model},
                      {"vocab", mc.vocab_size},
                      {"params", model.num_parameters()},
                      {"precision", model::precision_name(options.precision)},
                      {"recompute", model::recompute_name(options.recompute)},
                      {"threads", num_threads()},
                      {"step_ms_mean", 1e3 * mean},
                      {"optimizer_ms_mean", 1e3 * optimizer_total / steps},
                      {"tokens_per_s", B * T / mean},
                      {"first_loss", first_loss},
                      {"last_loss", last_loss}};
  r["ranks"] = world.size();
  r["tp"] = tp;
  r["sp"] = sp;
  r["model_comm_ms_mean"] = 1e3 * model_comm_total / steps;
  r["comm"] = comm;
  r["zero"] = zero;
  const train::MemoryReport memory = state.memory();
  r["model_state_bytes"] = memory.model_state();
  r["working_bytes"] = memory.working;
  r["bucket_mb"] = bucket_mb;
  r["device"] = device;
  r["model_flops_per_token"] = model_flops;
  r["model_flops_per_s"] = double(B * T) / mean * model_flops;
  if (profile) {
    nlohmann::json classes = nlohmann::json::object();
    for (int c = 0; c < kernels::kOpClasses; ++c) {
      const kernels::OpTotals& t = ops[c];
      classes[std::string(kernels::op_class_name(kernels::OpClass(c)))] = {
          {"seconds", t.seconds / steps}, {"flops", t.flops / steps}, {"bytes", t.bytes / steps}};
    }
    r["profile"] = classes;
  }
  if (limits && !ctx.on_cuda()) {
    const bench::MachineLimits m = bench::measure_machine_limits();
    r["limits"] = m.json();
    const double rate = options.precision == model::Precision::kF32 ? m.f32_matmul : m.bf16_matmul;
    r["share_of_matmul_rate"] = double(B * T) / mean * model_flops / rate;
  }
  if (ctx.on_cuda()) {
    const std::string name = kernels::cuda_device_info(ctx.device.ordinal).name;
    const double peak = kernels::cuda_dense_bf16_peak(name);
    r["device_name"] = name;
    r["peak_flops"] = peak;
    r["mfu"] = double(B * T) / mean * model_flops / peak;
  }
  if (world.rank() == 0) std::printf("RESULT %s\n", r.dump().c_str());
}
