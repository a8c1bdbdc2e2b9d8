#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tessera/core/huge_pages.h"
#include "tessera/kernels/context.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parameter_store.h"

namespace tessera::model {

// A LoRA run's frozen model: the units before the adapters', written once (initialised, or read
// from the base's checkpoint) and never given gradients. Unit 0 (embeddings, head) is held as the
// model reads it: f32, plus its copy in the run's low precision. Each block is packed: with
// train.lora_quantize q8_0 its weight matrices (attention, MLP, experts) in q8_0 blocks; in a low
// precision without it, its dense linears' matrices in that precision alone (the model reads no
// f32 of them); the rest of the block in f32. An acquired block is unpacked into working space,
// one for a block's dense parts and one for its expert stacks, since the model reads one block at
// a time. In f32 without q8_0 every unit is held as the model reads it. Host memory: LoRA trains
// on the CPU.
class FrozenParameters final : public ParameterStore {
 public:
  FrozenParameters(const kernels::Context& ctx, const ModelLayout& layout, Precision precision);

  // Writes the f32 values of the parameters at offsets [begin, end) to `to`.
  using Fill = std::function<void(int64_t begin, int64_t end, float* to)>;
  // Sets every parameter it holds, those of the units before the adapters', a unit at a time.
  void assign(const Fill& values);
  Weights acquire(int64_t unit) override;
  void release(int64_t unit) override;
  float* gradients(int64_t) override { return nullptr; }
  void gradients_done(int64_t) override {}
  int64_t bytes() const { return bytes_for(layout_plan_); }
  // What a run of this layout holds frozen (0 without adapters).
  static int64_t bytes(const ModelLayout& layout, Precision precision);

 private:
  // How a stretch of a packed unit is held.
  enum class Held { kF32, kLow, kQ8_0 };
  // A stretch of a packed unit, from the unit's first parameter.
  struct Segment {
    int64_t begin, end;
    Held held;
    int64_t bytes() const;
  };
  struct Packed {
    std::vector<Segment> segments;
    LargeVector<uint8_t> blocks;
    LargeVector<uint16_t> low;
    LargeVector<float> f32;
  };
  struct WorkingSpace {
    int64_t unit = -1;  // whose values it holds
    int holders = 0;
    LargeVector<float> f32;
    LargeVector<uint16_t> low;
  };
  // How a layout's frozen units are held.
  struct Plan {
    int64_t resident_values = 0, dense_space = 0, expert_space = 0;
    std::vector<std::vector<Segment>> packed;  // per unit after the resident ones
    bool low = false;
  };
  static Plan plan(const ModelLayout& layout, Precision precision);
  static int64_t bytes_for(const Plan& plan);
  int64_t units() const { return int64_t(units_.size()); }
  WorkingSpace& working_space(int64_t unit);
  // Fills the space with the unit's values, f32 and low-precision, as the model reads them.
  void unpack(int64_t unit, WorkingSpace& space) const;

  const kernels::Context& ctx_;
  Plan layout_plan_;
  std::vector<ParameterUnit> units_;
  std::optional<kernels::LowPrecision> low_;
  int64_t resident_units_ = 0;  // units [0, resident_units_) are held as the model reads them
  int64_t dense_block_units_ = 0;
  LargeVector<float> resident_;
  LargeVector<uint16_t> resident_low_;
  std::vector<Packed> packed_;  // unit resident_units_ + i at i
  WorkingSpace dense_space_, expert_space_;
};

}  // namespace tessera::model
