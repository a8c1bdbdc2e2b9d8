// Times full training steps (forward, backward, AdamW) of a GPT-2 shape on random tokens, the
// same work torch_gpt.py --mode train does, and prints one 'RESULT {...}' JSON line.
// The step runs through the trainer's ZeRO state (--zero 0..3, default 0). Under mpirun each rank
// trains its own batch, and --comm chooses how gradients are averaged: none (each rank alone, no
// communication: the baseline), overlap (stages 0 and 1 reduce buckets while backward runs, as
// the trainer does) or after (stages 0 and 1 reduce every bucket once backward has finished).
// Stages 2 and 3 reduce-scatter each block's gradients as backward finishes it either way.
// --tp N splits the model over N tensor-parallel ranks of the job and --cp N each sequence over N
// context-parallel ranks (the rest are data parallel; --sp 1 adds sequence parallelism); the
// result then holds the seconds per step the model's tensor- and context-parallel collectives
// took (model_comm_ms_mean). --probe-allreduce BYTES instead times
// all-reduces of that many f32 bytes over the job and prints their mean seconds. --device cuda
// trains on each rank's CUDA device (its local rank's) and adds the MFU over the device's dense
// bf16 peak.
// --profile 1 adds the op profile of the timed steps (seconds, FLOPs and bytes per step of each
// class of kernel: kernels/op_profile.h) and --limits 1 the machine's matmul rates and memory
// bandwidth measured in the same run (bench/machine_limits.h), with the run's model FLOPs/s as a
// share of the matmul rate in its precision. --kv-heads and --ffn shape Llama models.
// --lora-rank R trains LoRA adapters of rank R (alpha 2R) on the attention and MLP linears of a
// frozen model instead of every weight, --lora-dropout P with dropout P on their inputs,
// --lora-quantize q8_0 with the frozen model's block matrices held in q8_0.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "machine_limits.h"
#include "tessera/comm/mesh.h"
#include "tessera/comm/single_communicator.h"
#include "tessera/comm/world.h"
#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/core/threading.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/op_profile.h"
#include "tessera/model/flops.h"
#include "tessera/model/transformer.h"
#include "tessera/parallel/model_parallel.h"
#include "tessera/runtime/train_step.h"
#include "tessera/train/train_state.h"

using namespace tessera;

namespace {

constexpr int32_t kSeparator = 0;  // with --documents, ends each packed document

struct BenchOptions {
  std::string comm = "overlap", device = "cpu";
  double bucket_mb = 4;
  model::ModelConfig mc;
  model::ModelOptions model;
  int64_t B = 8, T = 256, warmup = 3, steps = 10, zero = 0, tp = 1, cp = 1, sp = 0;
  int64_t probe_bytes = 0;
  int64_t documents = 0;  // tokens per packed document, its last the separator; 0: one per row
  bool profile = false, limits = false;
};

// The flags above, as pairs; an unknown flag or a bad value is an error naming it.
BenchOptions parse_flags(int argc, char** argv) {
  BenchOptions o;
  o.mc.vocab_size = 50257;
  o.mc.max_seq = 1024;
  const std::map<std::string, int64_t*> counts = {{"--n-layer", &o.mc.n_layer},
                                                  {"--n-head", &o.mc.n_head},
                                                  {"--kv-heads", &o.mc.n_kv_head},
                                                  {"--ffn", &o.mc.ffn_hidden},
                                                  {"--d-model", &o.mc.d_model},
                                                  {"--vocab", &o.mc.vocab_size},
                                                  {"--batch", &o.B},
                                                  {"--seq", &o.T},
                                                  {"--steps", &o.steps},
                                                  {"--warmup", &o.warmup},
                                                  {"--zero", &o.zero},
                                                  {"--tp", &o.tp},
                                                  {"--cp", &o.cp},
                                                  {"--sp", &o.sp},
                                                  {"--probe-allreduce", &o.probe_bytes},
                                                  {"--documents", &o.documents},
                                                  {"--lora-rank", &o.mc.lora.rank}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--precision") {
      o.model.precision = enum_from_name<model::Precision>(v, k);
    } else if (k == "--recompute") {
      o.model.recompute = enum_from_name<model::Recompute>(v, k);
    } else if (k == "--comm") {
      o.comm = v;
    } else if (k == "--device") {
      o.device = v;
    } else if (k == "--lora-dropout") {
      o.mc.lora.dropout = std::stod(v);
    } else if (k == "--lora-quantize") {
      o.mc.lora.quantize = enum_from_name<model::FrozenWeights>(v, k);
    } else if (k == "--bucket-mb") {
      o.bucket_mb = std::stod(v);
    } else if (k == "--arch") {
      o.mc.arch = enum_from_name<model::Architecture>(v, k);
      o.mc.tie_embeddings = o.mc.arch == model::Architecture::kGpt2;
    } else if (k == "--profile") {
      o.profile = std::stoll(v) != 0;
    } else if (k == "--limits") {
      o.limits = std::stoll(v) != 0;
    } else if (k == "--threads") {
      set_num_threads(int(std::stoll(v)));
    } else if (auto it = counts.find(k); it != counts.end()) {
      *it->second = std::stoll(v);
    } else {
      fail("unknown flag {}", k);
    }
  }
  check(o.comm == "none" || o.comm == "overlap" || o.comm == "after",
        "--comm must be none, overlap or after, got {}", o.comm);
  check(o.device == "cpu" || o.device == "cuda", "--device must be cpu or cuda, got {}", o.device);
  check(o.documents >= 0, "--documents must be at least 0, got {}", o.documents);
  if (o.documents > 0) o.model.document_separator = kSeparator;
  o.mc.max_seq = std::max(o.mc.max_seq, o.T);
  o.mc.lora.alpha = 2.0 * double(o.mc.lora.rank);
  return o;
}

// The mean seconds of an all-reduce of `bytes` f32 bytes over the job.
nlohmann::json probe_allreduce(comm::Communicator& world, int64_t bytes) {
  std::vector<float> buffer(size_t(bytes / 4), 1.0f);
  for (int i = 0; i < 3; ++i) world.all_reduce(buffer.data(), int64_t(buffer.size()), DType::f32);
  const int repeats = 20;
  world.barrier();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) {
    world.all_reduce(buffer.data(), int64_t(buffer.size()), DType::f32);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {{"bytes", bytes}, {"ranks", world.size()}, {"allreduce_s_mean", s / repeats}};
}

struct Timings {
  double total = 0, optimizer = 0, model_comm = 0, first_loss = 0, last_loss = 0;
  kernels::OpProfile ops{};
};

// warmup + steps steps on rotating rows of random tokens, each rank taking its chunks of them
// (`split`); the timed ones summed. replicas: the ranks whose gradients are summed.
Timings run_steps(const BenchOptions& o, model::Transformer& model, train::TrainState& state,
                  const parallel::ModelGroups& groups, const kernels::Context& ctx, int replicas,
                  const model::SequenceSplit& split) {
  const int64_t B = o.B, T = o.T, local = T / split.ranks;
  CounterRng rng(42, 0);
  std::vector<int32_t> pool(64 * (T + 1));
  for (size_t i = 0; i < pool.size(); ++i) {
    const bool ends_document = o.documents > 0 && int64_t(i % (T + 1) + 1) % o.documents == 0;
    pool[i] = ends_document ? kSeparator : int32_t(1 + rng.below(i, o.mc.vocab_size - 1));
  }
  std::vector<int32_t> x(B * T), y(B * T), x_local(B * local), y_local(B * local);
  Timings t;
  for (int64_t step = 0; step < o.warmup + o.steps; ++step) {
    if (o.profile && step == o.warmup) kernels::start_op_profile();
    for (int64_t b = 0; b < B; ++b) {
      const int32_t* row = pool.data() + ((step * B + b) % 64) * (T + 1);
      std::copy(row, row + T, x.data() + b * T);
      std::copy(row + 1, row + T + 1, y.data() + b * T);
    }
    split.take(x.data(), x_local.data(), B, local);
    split.take(y.data(), y_local.data(), B, local);
    const auto t0 = std::chrono::steady_clock::now();
    const double comm0 = groups.communication_seconds();
    state.zero_grad();
    state.begin_micro_step(o.comm == "overlap");
    const float loss = runtime::TrainStep(model).forward_backward(
        x_local.data(), y_local.data(), B, local, 1.0f / float(replicas), uint64_t(step) + 1);
    state.reduce_gradients();
    kernels::synchronize(ctx);
    const auto t1 = std::chrono::steady_clock::now();
    state.update(3e-4, 1.0f);
    kernels::synchronize(ctx);
    const auto t2 = std::chrono::steady_clock::now();
    if (step == 0) t.first_loss = loss;
    t.last_loss = loss;
    if (step < o.warmup) continue;
    t.optimizer += std::chrono::duration<double>(t2 - t1).count();
    t.total += std::chrono::duration<double>(t2 - t0).count();
    t.model_comm += groups.communication_seconds() - comm0;
  }
  if (o.profile) t.ops = kernels::stop_op_profile();
  return t;
}

nlohmann::json profile_json(const kernels::OpProfile& ops, int64_t steps) {
  nlohmann::json classes = nlohmann::json::object();
  for (int c = 0; c < kernels::kOpClasses; ++c) {
    const kernels::OpTotals& t = ops[c];
    classes[std::string(kernels::op_class_name(kernels::OpClass(c)))] = {
        {"seconds", t.seconds / steps}, {"flops", t.flops / steps}, {"bytes", t.bytes / steps}};
  }
  return classes;
}

// Every parameter, or a LoRA run's adapters alone; padding excluded.
int64_t trained_parameters(const model::ModelLayout& layout) {
  int64_t n = 0;
  for (const model::ParamInfo& p : layout.params.entries()) {
    if (!layout.has_adapters() || p.offset >= layout.adapters_begin) n += p.shape.numel();
  }
  return n;
}

nlohmann::json result_json(const BenchOptions& o, const model::Transformer& model,
                           const train::TrainState& state, const kernels::Context& ctx,
                           const Timings& t, int ranks) {
  const int64_t B = o.B, T = o.T;
  const double mean = t.total / double(o.steps);
  const double model_flops = model::flops_per_token(o.mc, T, o.model.recompute).model;
  const train::MemoryReport memory = state.memory();
  nlohmann::json r = {{"B", B},
                      {"T", T},
                      {"n_layer", o.mc.n_layer},
                      {"d_model", o.mc.d_model},
                      {"vocab", o.mc.vocab_size},
                      {"params", model.num_parameters()},
                      {"trained_params", trained_parameters(model.model_layout())},
                      {"precision", enum_name(o.model.precision)},
                      {"recompute", enum_name(o.model.recompute)},
                      {"threads", num_threads()},
                      {"step_ms_mean", 1e3 * mean},
                      {"optimizer_ms_mean", 1e3 * t.optimizer / double(o.steps)},
                      {"tokens_per_s", double(B * T) / mean},
                      {"first_loss", t.first_loss},
                      {"last_loss", t.last_loss},
                      {"ranks", ranks},
                      {"tp", o.tp},
                      {"cp", o.cp},
                      {"sp", o.sp},
                      {"model_comm_ms_mean", 1e3 * t.model_comm / double(o.steps)},
                      {"comm", o.comm},
                      {"zero", o.zero},
                      {"model_state_bytes", memory.model_state()},
                      {"working_bytes", memory.working},
                      {"bucket_mb", o.bucket_mb},
                      {"device", o.device},
                      {"model_flops_per_token", model_flops},
                      {"model_flops_per_s", double(B * T) / mean * model_flops}};
  if (o.profile) r["profile"] = profile_json(t.ops, o.steps);
  if (o.limits && !ctx.on_cuda()) {
    const bench::MachineLimits m = bench::measure_machine_limits();
    r["limits"] = m.json();
    const double rate = o.model.precision == model::Precision::kF32 ? m.f32_matmul : m.bf16_matmul;
    r["share_of_matmul_rate"] = double(B * T) / mean * model_flops / rate;
  }
  if (ctx.on_cuda()) {
    const std::string name = kernels::cuda_device_info(ctx.device.ordinal).name;
    const double peak = kernels::cuda_dense_bf16_peak(name);
    r["device_name"] = name;
    r["peak_flops"] = peak;
    r["mfu"] = double(B * T) / mean * model_flops / peak;
  }
  return r;
}

int run(int argc, char** argv) {
  comm::Communicator& world = comm::init_world(argc, argv);
  BenchOptions o = parse_flags(argc, argv);
  if (o.probe_bytes > 0) {
    const nlohmann::json r = probe_allreduce(world, o.probe_bytes);
    if (world.rank() == 0) std::printf("RESULT %s\n", r.dump().c_str());
    return 0;
  }
  const kernels::DeviceContext on(
      o.device == "cpu"
          ? kernels::Device{}
          : kernels::Device{kernels::DeviceKind::kCuda,
                            comm::local_rank() % std::max(1, kernels::cuda_device_count())});
  const kernels::Context& ctx = on.context();
  train::TrainConfig tc;
  tc.weight_decay = 0.0;
  tc.beta2 = 0.999;
  tc.precision = o.model.precision;
  tc.zero = o.zero;
  comm::SingleCommunicator alone;
  comm::Communicator& ranks = o.comm == "none" ? alone : world;
  const comm::Mesh mesh(
      ranks,
      {.dp = ranks.size() / (o.tp * o.cp), .tp = o.tp, .cp = o.cp, .sequence_parallel = o.sp != 0});
  const parallel::ModelGroups groups(mesh, o.mc, o.sp != 0);
  train::TrainState state(ctx, o.mc, tc, mesh, groups.parallel().sharding,
                          int64_t(o.bucket_mb * 1024 * 1024));
  o.model.context = &ctx;
  o.model.store = &state.store();
  o.model.parallel = &groups.parallel();
  model::Transformer model(o.mc, o.B, o.T / o.cp, true, o.model);
  state.init(1337);
  const Timings t = run_steps(o, model, state, groups, ctx, mesh.replicas().size(),
                              groups.parallel().sequence_split());
  const nlohmann::json r = result_json(o, model, state, ctx, t, world.size());
  if (world.rank() == 0) std::printf("RESULT %s\n", r.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
