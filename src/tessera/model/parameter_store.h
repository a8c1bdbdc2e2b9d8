#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessera/kernels/low_precision.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// A contiguous range of the flat parameter layout that the model uses as a whole. Unit 0 holds
// the embeddings and the head (lnf, lm_head), which the model needs at both ends of a step; unit
// 1 + l holds block l.
struct ParameterUnit {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
std::vector<ParameterUnit> parameter_units(const ModelLayout& layout);

// Where the model reads its parameters and accumulates its gradients, one unit at a time. A
// step acquires unit 0 first and releases it last; blocks are acquired one at a time, for
// forward and again for backward. Sharded data parallelism gathers a unit on acquire and
// reduces its gradients when backward is done with them.
class ParameterStore {
 public:
  // The unit's parameters in f32 and, when the model multiplies in low precision, their
  // low-precision copy; both point at the unit's first element and stay valid until release.
  struct Weights {
    const float* f32 = nullptr;
    const uint16_t* low = nullptr;
  };
  virtual ~ParameterStore() = default;
  virtual Weights acquire(int64_t unit) = 0;
  virtual void release(int64_t unit) = 0;
  // Where backward accumulates the unit's f32 gradients, from its first element; valid until
  // gradients_done(unit), after which the store owns them.
  virtual float* gradients(int64_t unit) = 0;
  virtual void gradients_done(int64_t unit) = 0;
};

// Every parameter and gradient in f32 in this process, plus the low-precision copy of the
// parameters when the model multiplies in low precision: inference, tests and tools.
class ResidentParameters final : public ParameterStore {
 public:
  ResidentParameters(const ModelLayout& layout, std::optional<kernels::LowPrecision> low,
                     bool with_gradients);

  // Writable parameters; the low-precision copy is refreshed on the next acquire.
  std::span<float> params() {
    low_stale_ = true;
    return params_;
  }
  std::span<float> grads() { return grads_; }

  Weights acquire(int64_t unit) override;
  void release(int64_t) override {}
  float* gradients(int64_t unit) override { return grads_.data() + units_[unit].begin; }
  void gradients_done(int64_t) override {}

 private:
  std::vector<ParameterUnit> units_;
  std::optional<kernels::LowPrecision> low_;
  std::vector<float> params_, grads_;
  std::vector<uint16_t> low_params_;
  bool low_stale_ = true;
};

// The initial value of the flat parameters [begin, end): N(0, 0.02) matrices, residual
// projections scaled by 1/sqrt(2 n_layer), unit norm gains, zero biases and padding. Each value
// depends only on its position, so ranks can initialise just their shards.
void initial_parameters(const ModelConfig& config, const ModelLayout& layout, uint64_t seed,
                        int64_t begin, int64_t end, float* out);

}  // namespace tessera::model
