#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessera/core/huge_pages.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// Where the model reads its parameters and accumulates its gradients, one unit at a time (see
// ParameterUnit). A step acquires unit 0 first and releases it last; blocks are acquired one at a
// time, for forward and again for backward. Sharded data parallelism gathers a unit on acquire
// and reduces its gradients when backward is done with them.
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
// parameters when the model multiplies in low precision: inference, tests and tools. The
// writable parameters are host memory; on another device the model reads a copy there, made
// again on the first acquire after a write, and the gradients live on that device.
class ResidentParameters final : public ParameterStore {
 public:
  ResidentParameters(const kernels::Context& ctx, const ModelLayout& layout,
                     std::optional<kernels::LowPrecision> low, bool with_gradients);

  // Writable parameters, on the host; the device's copies are refreshed on the next acquire.
  std::span<float> params() {
    stale_ = true;
    return params_;
  }
  // The gradients, on the model's device.
  std::span<float> grads() { return {grads_.data(), size_t(grads_.size())}; }

  Weights acquire(int64_t unit) override;
  void release(int64_t) override {}
  // Null when built without gradients: the parameters are frozen.
  float* gradients(int64_t unit) override {
    return grads_.size() == 0 ? nullptr : grads_.data() + units_[unit].begin;
  }
  void gradients_done(int64_t) override {}

 private:
  const kernels::Context& ctx_;
  std::vector<ParameterUnit> units_;
  std::optional<kernels::LowPrecision> low_;
  LargeVector<float> params_;
  // The parameters as the model reads them: params_ itself on the CPU, else a device copy.
  kernels::DeviceArray<float> device_params_;
  kernels::DeviceArray<uint16_t> low_params_;
  kernels::DeviceArray<float> grads_;
  bool stale_ = true;
};

// The initial value of the flat parameters [begin, end) of any rank's layout: each element takes
// the value its place in the whole tensor has (ParamInfo's init rule; padding is 0), so every
// layout starts from the same model and ranks can initialise just their shards.
void initial_parameters(const ModelLayout& layout, uint64_t seed, int64_t begin, int64_t end,
                        float* out);

}  // namespace tessera::model
