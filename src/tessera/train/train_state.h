#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <vector>

#include "tessera/comm/mesh.h"
#include "tessera/core/tensor.h"
#include "tessera/kernels/device.h"
#include "tessera/model/frozen_parameters.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parameter_store.h"
#include "tessera/parallel/zero_shards.h"
#include "tessera/train/optimizer.h"
#include "tessera/train/run_config.h"

namespace tessera::train {

// Bytes one rank holds: the model state the ZeRO formulas count (parameters, gradients, and
// optimizer state: AdamW's moments and, in low precision, f32 master weights), and working
// buffers sized by one unit rather than the model.
struct MemoryReport {
  int64_t params = 0, grads = 0, optimizer = 0, working = 0;
  int64_t model_state() const { return params + grads + optimizer; }
};

// This rank's training state: its pipeline stages (one without a pipeline, several when
// interleaved), each its slice of the model's parameters (tensor- and expert-parallel), sharded
// by ZeRO over the ranks that replicate it (the dense parts over dp, a mixture's expert stacks
// over the dp / ep ranks that hold the same experts), with AdamW over what it owns. Each stage
// serves its model as its parameter store. A tied embedding on several stages is held by the
// first stage and, as its own copy, by the last; their gradients are summed into both. A LoRA
// run trains its adapters alone: the rest of the model is frozen, held whole on every rank of the
// stage without gradients or optimizer state.
class TrainState {
 public:
  // `boundaries`: the first block of each pipeline stage and, last, n_layer (stage_boundaries);
  // empty: one stage of every block. The stages of this rank are those of its pp coordinate.
  // The state lives on ctx's device; on a CUDA device its data-parallel collectives go through
  // NCCL.
  TrainState(const kernels::Context& ctx, const model::ModelConfig& config,
             const TrainConfig& train, const comm::Mesh& mesh, const model::Sharding& sharding,
             int64_t bucket_bytes, std::span<const int64_t> boundaries = {});

  int stages() const { return int(stages_.size()); }
  // The pipeline's split: each stage's first block, then n_layer.
  std::span<const int64_t> boundaries() const { return boundaries_; }
  const model::ModelLayout& layout(int k = 0) const { return stages_.at(k)->layout; }
  model::ParameterStore& store(int k = 0) { return *stages_.at(k); }
  int zero_stage() const { return zero_; }
  int64_t bucket_count() const;

  // A LoRA run's base model is the seed's too, unless load_base read it from a step, which it
  // then reads again.
  void init(uint64_t seed);
  // Reads parameters (and, when asked, the AdamW moments) written by any layout; in a LoRA run,
  // the adapters'.
  void load(const std::filesystem::path& step_dir, bool with_optimizer);
  // A LoRA run: reads the frozen base model's parameters written by any layout.
  void load_base(const std::filesystem::path& step_dir);
  bool trains_adapters() const { return layout().has_adapters(); }
  // The step load_base read; none while the base is the seed's initial model.
  const std::optional<std::filesystem::path>& lora_base() const { return lora_base_; }
  // What this rank saves (nothing when another rank saves its slice), in host memory, and the
  // manifest metadata that places every rank's pieces ("placed"), or null when rank 0 saves every
  // tensor by name.
  std::vector<NamedTensor> checkpoint_tensors();
  nlohmann::json checkpoint_layout() const;

  // Called before each micro-step: ZeRO stages 0 and 1 reduce gradients only on a step's last
  // one (a pipeline passes false for all of them: its gradients are reduced after the schedule).
  void begin_micro_step(bool last);
  void zero_grad();
  // Completes the gradient reduction (and sums a tied embedding's gradients over the first and
  // last stage) and returns the seconds spent waiting for it.
  double reduce_gradients();
  // Over the whole model, on every rank.
  bool gradients_finite();
  double gradient_norm();
  // AdamW on the owned ranges with gradients times grad_multiplier, then the parameters are made
  // current on every rank that holds them.
  void update(double lr, float grad_multiplier);
  int64_t steps_taken() const { return stages_.front()->groups.front().adam->steps_taken(); }
  void set_steps_taken(int64_t n);

  MemoryReport memory() const;

 private:
  // Parameters replicated over the same ranks: the dense parts, or the expert stacks.
  struct Group {
    std::string name;
    int64_t first_unit = 0, end_unit = 0;  // the units it trains
    std::unique_ptr<parallel::ZeroShards> shards;
    std::unique_ptr<AdamW> adam;
    comm::Communicator* across = nullptr;  // ranks holding other slices of the group (ep)
    bool writes = false;                   // this rank saves its owned range
  };
  // A flat range whose values this many ranks hold (tensor-parallel copies, a tied embedding).
  struct Copies {
    int64_t begin, end, copies;
  };
  struct Stage final : model::ParameterStore {
    int index = 0;  // of the pipeline's stages
    model::ModelLayout layout;
    std::vector<Group> groups;
    std::vector<Copies> copies;
    std::optional<model::ParamInfo> tied;  // the embedding whose gradients another stage shares
    std::unique_ptr<model::FrozenParameters> frozen;  // a LoRA run's base model

    bool is_frozen(int64_t unit) const { return frozen && unit < layout.first_adapter_unit; }
    Group& group_of(int64_t unit);
    Group& group_at(int64_t offset);  // of the parameter at this offset
    Weights acquire(int64_t unit) override {
      return is_frozen(unit) ? frozen->acquire(unit) : group_of(unit).shards->acquire(unit);
    }
    void release(int64_t unit) override {
      if (is_frozen(unit)) {
        frozen->release(unit);
      } else {
        group_of(unit).shards->release(unit);
      }
    }
    float* gradients(int64_t unit) override {
      return is_frozen(unit) ? nullptr : group_of(unit).shards->gradients(unit);
    }
    void gradients_done(int64_t unit) override {
      if (!is_frozen(unit)) group_of(unit).shards->gradients_done(unit);
    }
  };
  double owned_square_sum(const Stage& s, Group& g);
  // checkpoint_tensors' tensors where the state lives.
  std::vector<NamedTensor> device_checkpoint_tensors();
  // A host buffer of at least n floats, for values on their way to the device.
  std::vector<float>& host_values(int64_t n);
  std::string piece_name(int rank, int stage, const std::string& group) const;

  const kernels::Context& ctx_;
  model::ModelConfig config_;
  const comm::Mesh& mesh_;
  std::unique_ptr<comm::Communicator> device_dp_;  // mesh.replicas() over device memory (NCCL)
  int zero_;
  std::vector<int64_t> boundaries_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::unique_ptr<comm::Communicator> tied_;  // the first and last pipeline ranks
  kernels::DeviceArray<float> scaled_;        // a gradient chunk times the update's multiplier
  std::vector<float> host_values_;
  std::vector<std::vector<float>> host_mirrors_;  // checkpoint_tensors' copies of device state
  std::optional<std::filesystem::path> lora_base_;
};

}  // namespace tessera::train
