#include "tessera/model/frozen_parameters.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "tessera/core/error.h"
#include "tessera/core/q8_0.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::model {

namespace k = kernels;

namespace {

// The block matrices a unit packs: with q8_0 every weight matrix of the block (the router aside);
// in a low precision the dense linears', which the model reads in that precision alone.
std::vector<int64_t> packed_matrices(const ModelLayout& layout, int64_t unit, bool q8_0) {
  const ParameterUnit& u = layout.units[unit];
  const int64_t blocks = int64_t(layout.blocks.size());
  const PartTable& parts = layout.blocks[unit > blocks ? unit - 1 - blocks : unit - 1];
  std::vector<int64_t> matrices;
  for (PartId id :
       {PartId::kQkv, PartId::kAttentionOut, PartId::kMlpIn, PartId::kMlpOut, PartId::kExpertsIn,
        PartId::kExpertsOut, PartId::kSharedIn, PartId::kSharedOut}) {
    const int64_t w = parts[id].weight;
    if (w < u.begin || w >= u.end) continue;
    if (q8_0 || std::ranges::find(kDenseLinearParts, id) != kDenseLinearParts.end())
      matrices.push_back(w);
  }
  std::sort(matrices.begin(), matrices.end());
  return matrices;
}

}  // namespace

int64_t FrozenParameters::Segment::bytes() const {
  const int64_t n = end - begin;
  switch (held) {
    case Held::kQ8_0:
      return n / kQ8BlockSize * kQ8BlockBytes;
    case Held::kLow:
      return 2 * n;
    case Held::kF32:
      break;
  }
  return 4 * n;
}

FrozenParameters::Plan FrozenParameters::plan(const ModelLayout& layout, Precision precision) {
  Plan plan;
  plan.low = precision != Precision::kF32;
  if (!layout.has_adapters()) return plan;
  const bool q8_0 = layout.spec.block.lora_quantize == FrozenWeights::kQ8_0;
  const int64_t resident_units = q8_0 || plan.low ? 1 : layout.first_adapter_unit;
  plan.resident_values = layout.units[resident_units - 1].end;
  for (int64_t u = resident_units; u < layout.first_adapter_unit; ++u) {
    const ParameterUnit& unit = layout.units[u];
    std::vector<Segment> segments;
    int64_t at = unit.begin;
    for (int64_t w : packed_matrices(layout, u, q8_0)) {
      const ParamInfo& p = layout.params.at_offset(w);
      const int64_t cols = p.shape[p.shape.rank() - 1];
      check(!q8_0 || cols % kQ8BlockSize == 0,
            "train.lora_quantize = \"q8_0\": the rows of {} are {} values wide on this rank, not a "
            "multiple of the {} in a q8_0 block; use train.lora_quantize = \"none\" for this "
            "model or layout",
            p.name, cols, kQ8BlockSize);
      if (at < w) segments.push_back({at - unit.begin, w - unit.begin, Held::kF32});
      at = w + p.shape.numel();
      segments.push_back({w - unit.begin, at - unit.begin, q8_0 ? Held::kQ8_0 : Held::kLow});
    }
    if (at < unit.end) segments.push_back({at - unit.begin, unit.size(), Held::kF32});
    plan.packed.push_back(std::move(segments));
    int64_t& space = u > int64_t(layout.blocks.size()) ? plan.expert_space : plan.dense_space;
    space = std::max(space, unit.size());
  }
  return plan;
}

int64_t FrozenParameters::bytes_for(const Plan& plan) {
  const int64_t per_value = plan.low ? 6 : 4;
  int64_t bytes = per_value * (plan.resident_values + plan.dense_space + plan.expert_space);
  for (const std::vector<Segment>& unit : plan.packed) {
    for (const Segment& s : unit) bytes += s.bytes();
  }
  return bytes;
}

int64_t FrozenParameters::bytes(const ModelLayout& layout, Precision precision) {
  return bytes_for(plan(layout, precision));
}

FrozenParameters::FrozenParameters(const k::Context& ctx, const ModelLayout& layout,
                                   Precision precision)
    : ctx_(ctx),
      layout_plan_(plan(layout, precision)),
      units_(layout.units.begin(), layout.units.begin() + layout.first_adapter_unit),
      dense_block_units_(int64_t(layout.blocks.size())) {
  check(layout.has_adapters(), "a frozen model is the base of a LoRA run, and this one has none");
  check(!ctx.on_cuda(), "a LoRA run's frozen model is held in host memory: train on the CPU");
  if (layout_plan_.low) low_ = low_precision_of(precision);
  resident_units_ = units() - int64_t(layout_plan_.packed.size());
  resident_.resize(layout_plan_.resident_values);
  if (low_) resident_low_.resize(layout_plan_.resident_values);
  for (const std::vector<Segment>& segments : layout_plan_.packed) {
    Packed p;
    p.segments = segments;
    int64_t count[3] = {0, 0, 0};
    for (const Segment& s : segments) count[int(s.held)] += s.end - s.begin;
    p.f32.resize(count[int(Held::kF32)]);
    p.low.resize(count[int(Held::kLow)]);
    p.blocks.resize(count[int(Held::kQ8_0)] / kQ8BlockSize * kQ8BlockBytes);
    packed_.push_back(std::move(p));
  }
  for (WorkingSpace* space : {&dense_space_, &expert_space_}) {
    const int64_t n = space == &dense_space_ ? layout_plan_.dense_space : layout_plan_.expert_space;
    // NaN where a matrix held in the low precision alone has no f32 values: read by mistake, it
    // would show in the loss.
    space->f32.assign(size_t(n), std::numeric_limits<float>::quiet_NaN());
    if (low_) space->low.resize(n);
  }
}

void FrozenParameters::assign(const Fill& values) {
  check(dense_space_.holders == 0 && expert_space_.holders == 0,
        "the frozen model was written while the model reads it");
  const int64_t resident = int64_t(resident_.size());
  values(0, resident, resident_.data());
  if (low_) k::cast_to_low(ctx_, resident_.data(), resident_low_.data(), resident, *low_);
  for (int64_t unit = resident_units_; unit < units(); ++unit) {
    const ParameterUnit& u = units_[unit];
    WorkingSpace& space = working_space(unit);
    space.unit = -1;  // the unit's values are read into it, then packed from there
    values(u.begin, u.end, space.f32.data());
    Packed& p = packed_[unit - resident_units_];
    uint8_t* blocks = p.blocks.data();
    uint16_t* low = p.low.data();
    float* f32 = p.f32.data();
    for (const Segment& s : p.segments) {
      const float* from = space.f32.data() + s.begin;
      const int64_t n = s.end - s.begin;
      if (s.held == Held::kF32) {
        f32 = std::copy(from, from + n, f32);
      } else if (s.held == Held::kLow) {
        k::cast_to_low(ctx_, from, low, n, *low_);
        low += n;
      } else {
        check(k::all_finite(ctx_, from, n),
              "the frozen model's unit {} holds inf or NaN, which q8_0 cannot hold", unit);
        quantize_q8_0({from, size_t(n)}, {blocks, size_t(s.bytes())});
        blocks += s.bytes();
      }
    }
    std::fill(space.f32.begin(), space.f32.end(), std::numeric_limits<float>::quiet_NaN());
  }
}

FrozenParameters::WorkingSpace& FrozenParameters::working_space(int64_t unit) {
  return unit > dense_block_units_ ? expert_space_ : dense_space_;
}

void FrozenParameters::unpack(int64_t unit, WorkingSpace& space) const {
  const Packed& p = packed_[unit - resident_units_];
  const uint8_t* blocks = p.blocks.data();
  const uint16_t* low = p.low.data();
  const float* f32 = p.f32.data();
  for (const Segment& s : p.segments) {
    const int64_t n = s.end - s.begin;
    float* to = space.f32.data() + s.begin;
    if (s.held == Held::kLow) {
      std::memcpy(space.low.data() + s.begin, low, sizeof(uint16_t) * size_t(n));
      low += n;
      continue;
    }
    if (s.held == Held::kF32) {
      std::copy(f32, f32 + n, to);
      f32 += n;
    } else {
      dequantize_q8_0({blocks, size_t(s.bytes())}, {to, size_t(n)});
      blocks += s.bytes();
    }
    if (low_) k::cast_to_low(ctx_, to, space.low.data() + s.begin, n, *low_);
  }
  space.unit = unit;
}

ParameterStore::Weights FrozenParameters::acquire(int64_t unit) {
  check(unit >= 0 && unit < units(), "a frozen model holds units [0, {}), not {}", units(), unit);
  const ParameterUnit& u = units_[unit];
  if (unit < resident_units_) {
    return {resident_.data() + u.begin, low_ ? resident_low_.data() + u.begin : nullptr};
  }
  WorkingSpace& space = working_space(unit);
  if (space.unit != unit) {
    check(space.holders == 0,
          "the frozen model's unit {} was acquired while unit {} is in use: the model reads one "
          "block at a time",
          unit, space.unit);
    unpack(unit, space);
  }
  ++space.holders;
  return {space.f32.data(), low_ ? space.low.data() : nullptr};
}

void FrozenParameters::release(int64_t unit) {
  if (unit < resident_units_) return;
  WorkingSpace& space = working_space(unit);
  check(space.unit == unit && space.holders > 0,
        "the frozen model's unit {} was released but not acquired", unit);
  --space.holders;
}

}  // namespace tessera::model
