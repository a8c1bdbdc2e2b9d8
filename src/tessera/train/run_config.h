// Every run setting, one row each over the typed, validated structs the trainer reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/comm/mesh_shape.h"
#include "tessera/core/config.h"
#include "tessera/core/settings.h"
#include "tessera/kernels/context.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_config.h"
#include "tessera/train/divergence_guard.h"

namespace tessera::train {

struct TrainConfig {
  int64_t batch_size = 16;  // over all data-parallel ranks
  int64_t seq_len = 256;
  int64_t steps = 600;
  int64_t grad_accum = 1;
  double lr = 2e-3;
  double min_lr = 2e-4;
  int64_t warmup_steps = 50;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;  // 0 disables clipping
  model::Precision precision = model::Precision::kF32;
  model::Recompute recompute = model::Recompute::kNone;
  bool document_mask = false;  // packed documents do not attend to each other
  int64_t zero = 0;            // ZeRO stage
  double loss_scale = 65536;   // f16 only: the initial dynamic loss scale
  int64_t loss_scale_growth_interval = 1000;
  int64_t seed = 1337;
  kernels::DeviceKind device = kernels::DeviceKind::kCpu;
  int64_t threads = 0;  // 0 = all cores
  int64_t eval_every = 100;
  int64_t eval_batches = 8;
  int64_t log_every = 10;
  double peak_flops = 0;  // of one rank's device, for MFU; 0: measured (CPU) or looked up (CUDA)
};

struct DataConfig {
  std::string path;       // a prepared dataset folder, or text prepared into the run folder
  std::string tokenizer;  // for text: "" (= "byte") or a tokenizer folder
  double val_fraction = 0.1;
  int64_t prefetch = 2;
};

struct CheckpointConfig {
  int64_t every = 200;  // 0 = only at the end
  int64_t keep_last = 2;
  bool async = true;
  double preempt_timeout_s = 120;
};

struct DistConfig {
  double timeout_s = 300;
  double bucket_mb = 4;
  bool elastic = false;  // a world smaller or larger than the mesh changes mesh.dp
};

// Where a run's numbers go besides the log and metrics.jsonl.
struct ObsConfig {
  int64_t metrics_port = -1;  // serve /metrics, /health and the live page; -1: no; 0: any port
  std::string metrics_host = "127.0.0.1";
  bool metrics_all_ranks = false;            // every rank serves, on metrics_port + its rank
  int64_t trace_first = 0, trace_last = -1;  // steps traced (obs.trace_steps = first:last)
  bool tracing() const { return trace_last >= trace_first; }
};

// Faults made on purpose, to test what catches them.
struct FaultConfig {
  std::vector<int64_t> nan_gradient_steps;  // steps whose gradients become NaN, once each
};

struct RunConfig {
  model::ModelConfig model;
  TrainConfig train;
  comm::MeshShape mesh;
  DistConfig dist;
  DataConfig data;
  CheckpointConfig checkpoint;
  GuardConfig guard;
  ObsConfig obs;
  FaultConfig fault;
};

// Every key a run understands, [model] first: the defaults (the structs') are the built-in tiny
// byte-level model. Every key but the model's says why a Hugging Face folder leaves it alone.
const Settings<RunConfig>& run_settings();
std::vector<ConfigKey> run_config_schema();

// Reads and validates every value; throws tessera::Error naming the key at fault.
RunConfig run_config_from(const Config& config);

// With dist.elastic, the config for a world of `world_size` ranks: mesh.dp becomes what the
// other axes leave of it, when that is a valid layout. Otherwise (or when the sizes agree) the
// config unchanged; a mesh that does not fit the world is then reported by the mesh itself.
Config elastic_config(const Config& config, int world_size);

}  // namespace tessera::train
