#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/dist/communicator.h"
#include "tessera/dist/gradient_sync.h"
#include "tessera/model/execution.h"
#include "tessera/model/parameter_store.h"
#include "tessera/train/optimizer.h"

namespace tessera::train {

// Bytes one rank holds. The model state (parameters, gradients, optimizer state) is what the
// ZeRO formulas count; working buffers (gathered or widened units, gradient staging, reduction
// scratch) are sized by one unit rather than by the model and are reported apart.
struct MemoryReport {
  int64_t params = 0, grads = 0, optimizer = 0, working = 0;
  int64_t model_state() const { return params + grads + optimizer; }
};

// Data-parallel training state sharded by ZeRO stage over the dp ranks, serving the model as its
// parameter store. The flat parameter buffer is cut into one contiguous shard per rank.
//   0: every rank holds everything; gradients are all-reduced in buckets overlapping backward.
//   1: a rank updates only its shard (AdamW moments, and f32 master weights in low precision);
//      the gradients are all-reduced as in stage 0, the updated parameters all-gathered.
//   2: gradients are reduce-scattered unit by unit as backward finishes them, on every
//      micro-step, and only the shard is kept.
//   3: parameters are sharded too and gathered unit by unit, for forward and again for backward.
// In low precision the parameters are kept in the compute format (bf16 or f16) and widened to
// f32 unit by unit for the norms, biases and embeddings; bf16 training keeps bf16 gradients.
class ZeroState final : public model::ParameterStore {
 public:
  ZeroState(const model::ModelConfig& config, const TrainConfig& train, int stage,
            dist::Communicator& dp, int64_t bucket_bytes);

  const model::ModelLayout& layout() const { return layout_; }
  int stage() const { return stage_; }
  int64_t bucket_count() const { return sync_ ? sync_->bucket_count() : 0; }

  void init(uint64_t seed);
  // Reads parameters (and, when asked, the AdamW moments) written by any stage and rank count.
  void load(const std::filesystem::path& step_dir, bool with_optimizer);
  // What this rank saves: with stage 0 every parameter and moment under its own name, otherwise
  // its shard, named by rank; checkpoint_layout() says which.
  std::vector<NamedTensor> checkpoint_tensors();
  nlohmann::json checkpoint_layout() const;

  // Called before each micro-step: stages 0 and 1 reduce gradients only on a step's last one.
  void begin_micro_step(bool last) { last_micro_step_ = last; }
  void zero_grad();
  // Completes the gradient reduction and returns the seconds spent waiting for it.
  double reduce_gradients();
  bool gradients_finite();
  double gradient_norm();
  // AdamW on this rank's range with gradients times grad_multiplier, then the parameters are
  // made current on every rank that holds them.
  void update(double lr, float grad_multiplier);
  int64_t steps_taken() const { return adam_.steps_taken(); }
  void set_steps_taken(int64_t n) { adam_.set_steps_taken(n); }

  MemoryReport memory() const;

  Weights acquire(int64_t unit) override;
  void release(int64_t) override {}
  float* gradients(int64_t unit) override;
  void gradients_done(int64_t unit) override;

 private:
  // Working buffers of a unit being used: unit 0's, and one shared by the blocks.
  struct Slot {
    std::vector<float> f32, grads;
    std::vector<uint16_t> low;
  };
  Slot& slot(int64_t unit) { return slots_[unit == 0 ? 0 : 1]; }
  bool direct_gradients() const { return stage_ < 2 && !low_grads_; }
  // Elements of [begin, end) that rank r's shard holds, per rank.
  std::span<const int64_t> shard_counts(int64_t begin, int64_t end);
  void* param_storage(int64_t flat);
  float* master(int64_t flat);
  const float* gradient_chunk(int64_t flat, int64_t n);
  void accumulate_gradients(int64_t flat, const float* g, int64_t n);
  void publish_parameters();

  model::ModelConfig config_;
  model::ModelLayout layout_;
  std::vector<model::ParameterUnit> units_;
  int stage_;
  dist::Communicator& dp_;
  std::optional<kernels::LowPrecision> low_;
  bool low_grads_;
  int64_t total_;
  std::vector<int64_t> shard_bounds_;  // rank r holds [bounds[r], bounds[r + 1])
  int64_t lo_, hi_;
  AdamW adam_;  // over this rank's shard from stage 1, over everything at stage 0
  int64_t params_base_ = 0, grads_base_ = 0;  // flat offset of each storage's first element
  std::vector<float> params_f32_, grads_f32_, master_;
  std::vector<uint16_t> params_low_, grads_low_;
  Slot slots_[2];
  std::vector<float> reduced_, chunk_;
  std::vector<int64_t> counts_;  // per rank, reused by every collective
  std::optional<dist::GradientSync> sync_;
  bool last_micro_step_ = true;
};

}  // namespace tessera::train
