#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/mesh.h"
#include "tessera/dist/zero_shards.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parameter_store.h"
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

// This rank's training state: its slice of the model's parameters (tensor- and expert-parallel),
// sharded by ZeRO over the ranks that replicate it (the dense parts over dp, a mixture's expert
// stacks over the dp / ep ranks that hold the same experts), with AdamW over what it owns. It
// serves the model as its parameter store.
class TrainState final : public model::ParameterStore {
 public:
  TrainState(const model::ModelConfig& config, const TrainConfig& train, const dist::Mesh& mesh,
             const model::Sharding& sharding, int64_t bucket_bytes);

  const model::ModelLayout& layout() const { return layout_; }
  int stage() const { return stage_; }
  int64_t bucket_count() const;

  void init(uint64_t seed);
  // Reads parameters (and, when asked, the AdamW moments) written by any layout.
  void load(const std::filesystem::path& step_dir, bool with_optimizer);
  // What this rank saves (nothing when another rank saves its slice), and the manifest metadata
  // that places every rank's pieces ("placed"), or null when rank 0 saves every tensor by name.
  std::vector<NamedTensor> checkpoint_tensors();
  nlohmann::json checkpoint_layout() const;

  // Called before each micro-step: stages 0 and 1 reduce gradients only on a step's last one.
  void begin_micro_step(bool last);
  void zero_grad();
  // Completes the gradient reduction and returns the seconds spent waiting for it.
  double reduce_gradients();
  // Over the whole model, on every rank.
  bool gradients_finite();
  double gradient_norm();
  // AdamW on the owned ranges with gradients times grad_multiplier, then the parameters are made
  // current on every rank that holds them.
  void update(double lr, float grad_multiplier);
  int64_t steps_taken() const { return groups_.front().adam->steps_taken(); }
  void set_steps_taken(int64_t n);

  MemoryReport memory() const;

  Weights acquire(int64_t unit) override { return group_of(unit).shards->acquire(unit); }
  void release(int64_t unit) override { group_of(unit).shards->release(unit); }
  float* gradients(int64_t unit) override { return group_of(unit).shards->gradients(unit); }
  void gradients_done(int64_t unit) override { group_of(unit).shards->gradients_done(unit); }

 private:
  // Parameters replicated over the same ranks: the dense parts, or the expert stacks.
  struct Group {
    std::string name;
    std::unique_ptr<dist::ZeroShards> shards;
    std::unique_ptr<AdamW> adam;
    dist::Communicator* across = nullptr;  // ranks holding other slices of the group (ep)
    bool writes = false;                   // this rank saves its owned range
  };
  // A flat range whose values this many tensor-parallel ranks hold.
  struct Copies {
    int64_t begin, end, copies;
  };
  Group& group_of(int64_t unit);
  double owned_square_sum(Group& g);

  model::ModelConfig config_;
  const dist::Mesh& mesh_;
  int stage_;
  model::ModelLayout layout_;
  std::vector<Group> groups_;
  std::vector<Copies> copies_;  // the flat ranges held by more than one tp rank
  std::vector<float> scaled_;   // a gradient chunk times the update's multiplier
};

}  // namespace tessera::train
