#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessera/comm/communicator.h"
#include "tessera/kernels/device.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parameter_store.h"
#include "tessera/parallel/gradient_sync.h"

namespace tessera::parallel {

// Bytes one rank holds for a group of parameters. The model state (parameters, gradients, f32
// master weights) is what the ZeRO formulas count, with the optimizer's moments, which live
// above this layer, added by its owner; working buffers (gathered or widened units, gradient
// staging, reduction scratch) are sized by one unit rather than by the model and are reported
// apart.
struct ShardBytes {
  int64_t params = 0, grads = 0, master = 0, working = 0;
};

// ZeRO data parallelism over one group of ranks for a contiguous run of a model's parameter
// units (all of a dense model's; the expert stacks, whose replicas are the expert-data-parallel
// ranks, apart from the rest), serving the model as its parameter store for those units. The
// run's flat range is cut into one contiguous shard per rank.
//   0: every rank holds everything; gradients are all-reduced in buckets overlapping backward.
//   1: a rank updates only its shard (and keeps f32 master weights of it in low precision); the
//      gradients are all-reduced as in stage 0, the updated parameters all-gathered.
//   2: gradients are reduce-scattered unit by unit as backward finishes them, on every
//      micro-step, and only the shard is kept.
//   3: parameters are sharded too and gathered unit by unit, for forward and again for backward.
// In low precision the parameters are kept in the compute format (bf16 or f16) and widened to
// f32 unit by unit for the norms, biases and embeddings; bf16 training keeps bf16 gradients.
class ZeroShards final : public model::ParameterStore {
 public:
  // Passes of the optimizer, the gradient norm and the finiteness check take at most this many
  // elements from gradient_chunk at a time.
  static constexpr int64_t kChunk = int64_t{1} << 18;

  // How ZeRO cuts the flat range [begin, end) over `ranks`: rank r holds [bounds[r], bounds[r+1]).
  static std::vector<int64_t> bounds(int64_t begin, int64_t end, int ranks);

  // Units [first_unit, end_unit) of `layout`, which must outlive this, held on ctx's device;
  // `group` moves that device's memory (NCCL for a CUDA device).
  ZeroShards(const kernels::Context& ctx, const model::ModelLayout& layout, int64_t first_unit,
             int64_t end_unit, int stage, model::Precision precision, comm::Communicator& group,
             int64_t bucket_bytes);

  int stage() const { return stage_; }
  // The format the parameters are kept in for the matmuls; none when f32.
  std::optional<kernels::LowPrecision> low_precision() const { return low_; }
  comm::Communicator& group() const { return group_; }
  int64_t begin() const { return begin_; }  // the run's flat range in the layout
  int64_t end() const { return end_; }
  // The flat range this rank updates: its shard from stage 1, the whole run at stage 0.
  int64_t owned_begin() const { return owned_begin_; }
  int64_t owned_end() const { return owned_end_; }
  // Each rank's shard [bounds[r], bounds[r + 1]).
  const std::vector<int64_t>& shard_bounds() const { return shard_bounds_; }
  int64_t bucket_count() const { return sync_ ? sync_->bucket_count() : 0; }

  // f32 values of the owned range, from `flat`, on the device; publish() makes changes to them
  // current.
  float* master(int64_t flat);
  void publish();
  // In low precision, what an update that writes the low-precision parameters itself reads and
  // writes of the owned range from `flat`: the gradients (bf16 where bf16 training keeps them so,
  // else f32; the other null) and the low-precision parameters. share() then does the rest of
  // publish(): the ranks' updated shards reach every rank that keeps them all.
  struct LowUpdate {
    const float* grads;
    const uint16_t* grads_bf16;
    uint16_t* params;
  };
  LowUpdate low_update(int64_t flat);
  void share();
  // The f32 gradients of the owned [flat, flat + n), n <= kChunk; valid until the next call.
  const float* gradient_chunk(int64_t flat, int64_t n);

  // Called before each micro-step: stages 0 and 1 reduce gradients only on a step's last one.
  void begin_micro_step(bool last) { last_micro_step_ = last; }
  void zero_grad();
  // Completes the gradient reduction and returns the seconds spent waiting for it.
  double reduce_gradients();
  // Sums the gradients of [flat, flat + n) over `group` in place (a tied embedding's over the
  // stages that hold it); stages 0 and 1 only, which keep every gradient.
  void all_reduce_gradients(int64_t flat, int64_t n, comm::Communicator& group);

  ShardBytes memory() const;

  Weights acquire(int64_t unit) override;
  void release(int64_t) override {}
  float* gradients(int64_t unit) override;
  void gradients_done(int64_t unit) override;

 private:
  // Working buffers of a unit being used: unit 0's (the embeddings and head), and one shared by
  // the rest.
  struct Slot {
    kernels::DeviceArray<float> f32, grads;
    kernels::DeviceArray<uint16_t> low;
  };
  const model::ParameterUnit& unit(int64_t u) const;
  Slot& slot(int64_t u) { return slots_[u == 0 ? 0 : 1]; }
  bool direct_gradients() const { return stage_ < 2 && !low_grads_; }
  // Elements of [begin, end) that rank r's shard holds, per rank.
  std::span<const int64_t> shard_counts(int64_t begin, int64_t end);
  void* param_storage(int64_t flat);
  // Adds unit u's gradients g for [flat, flat + n) into the kept ones.
  void accumulate_gradients(int64_t u, int64_t flat, const float* g, int64_t n);
  // Widens unit u's parameters that are read in f32 from its low-precision values into f32.
  void widen(int64_t u, const uint16_t* low, float* f32);

  const kernels::Context& ctx_;
  const model::ModelLayout& layout_;
  int64_t first_unit_, end_unit_;
  int stage_;
  comm::Communicator& group_;
  std::optional<kernels::LowPrecision> low_;
  bool low_grads_;
  int64_t begin_, end_;
  std::vector<int64_t> shard_bounds_;  // absolute flat offsets
  int64_t lo_, hi_, owned_begin_, owned_end_;
  int64_t params_base_ = 0, grads_base_ = 0;  // flat offset of each storage's first element
  kernels::DeviceArray<float> params_f32_, grads_f32_, master_;
  kernels::DeviceArray<uint16_t> params_low_, grads_low_;
  Slot slots_[2];
  // Per unit from first_unit_, in low precision: the ranges of its parameters read in f32.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> widened_;
  kernels::DeviceArray<float> reduced_, chunk_;
  std::vector<int64_t> counts_;  // per rank, reused by every collective
  std::optional<GradientSync> sync_;
  bool last_micro_step_ = true;
  // Per unit from first_unit_, with bf16 gradients: none added since zero_grad.
  std::vector<char> fresh_;
};

}  // namespace tessera::parallel
