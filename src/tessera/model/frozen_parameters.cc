#include "tessera/model/frozen_parameters.h"

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/q8_0.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::model {

namespace k = kernels;

FrozenParameters::Plan FrozenParameters::plan(const ModelLayout& layout, Precision precision) {
  Plan plan;
  plan.low = precision != Precision::kF32;
  if (!layout.has_adapters()) return plan;
  const bool q8_0 = layout.spec.block.lora_quantize == FrozenWeights::kQ8_0;
  const int64_t resident_units = q8_0 ? 1 : layout.first_adapter_unit;
  plan.resident_values = layout.units[resident_units - 1].end;
  const int64_t blocks = int64_t(layout.blocks.size());
  for (int64_t u = resident_units; u < layout.first_adapter_unit; ++u) {
    const ParameterUnit& unit = layout.units[u];
    const bool experts = u > blocks;
    const PartTable& parts = layout.blocks[experts ? u - 1 - blocks : u - 1];
    std::vector<int64_t> matrices;
    for (PartId id :
         {PartId::kQkv, PartId::kAttentionOut, PartId::kMlpIn, PartId::kMlpOut, PartId::kExpertsIn,
          PartId::kExpertsOut, PartId::kSharedIn, PartId::kSharedOut}) {
      const int64_t w = parts[id].weight;
      if (w >= unit.begin && w < unit.end) matrices.push_back(w);
    }
    std::sort(matrices.begin(), matrices.end());
    std::vector<Segment> segments;
    int64_t at = unit.begin;
    for (int64_t w : matrices) {
      const ParamInfo& p = layout.params.at_offset(w);
      const int64_t cols = p.shape[p.shape.rank() - 1];
      check(cols % kQ8BlockSize == 0,
            "train.lora_quantize = \"q8_0\": the rows of {} are {} values wide on this rank, not a "
            "multiple of the {} in a q8_0 block; use train.lora_quantize = \"none\" for this "
            "model or layout",
            p.name, cols, kQ8BlockSize);
      if (at < w) segments.push_back({at - unit.begin, w - unit.begin, false});
      at = w + p.shape.numel();
      segments.push_back({w - unit.begin, at - unit.begin, true});
    }
    if (at < unit.end) segments.push_back({at - unit.begin, unit.end - unit.begin, false});
    plan.quantized.push_back(std::move(segments));
    int64_t& space = experts ? plan.expert_space : plan.dense_space;
    space = std::max(space, unit.size());
  }
  return plan;
}

int64_t FrozenParameters::bytes_for(const Plan& plan) {
  const int64_t per_value = plan.low ? 6 : 4;
  int64_t bytes = per_value * (plan.resident_values + plan.dense_space + plan.expert_space);
  for (const std::vector<Segment>& unit : plan.quantized) {
    for (const Segment& s : unit) {
      bytes += s.q8_0 ? (s.end - s.begin) / kQ8BlockSize * kQ8BlockBytes : 4 * (s.end - s.begin);
    }
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
  resident_units_ = units() - int64_t(layout_plan_.quantized.size());
  resident_.resize(layout_plan_.resident_values);
  if (low_) resident_low_.resize(layout_plan_.resident_values);
  for (const std::vector<Segment>& segments : layout_plan_.quantized) {
    Quantized q;
    q.segments = segments;
    int64_t blocks = 0, rest = 0;
    for (const Segment& s : segments) (s.q8_0 ? blocks : rest) += s.end - s.begin;
    q.blocks.resize(blocks / kQ8BlockSize * kQ8BlockBytes);
    q.rest.resize(rest);
    quantized_.push_back(std::move(q));
  }
  for (WorkingSpace* space : {&dense_space_, &expert_space_}) {
    const int64_t n = space == &dense_space_ ? layout_plan_.dense_space : layout_plan_.expert_space;
    space->f32.resize(n);
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
    space.unit = -1;  // the unit's values are read into it, then quantised from there
    values(u.begin, u.end, space.f32.data());
    Quantized& q = quantized_[unit - resident_units_];
    uint8_t* blocks = q.blocks.data();
    float* rest = q.rest.data();
    for (const Segment& s : q.segments) {
      const float* from = space.f32.data() + s.begin;
      const int64_t n = s.end - s.begin;
      if (!s.q8_0) {
        rest = std::copy(from, from + n, rest);
        continue;
      }
      check(k::all_finite(ctx_, from, n),
            "the frozen model's unit {} holds inf or NaN, which q8_0 cannot hold", unit);
      const int64_t bytes = n / kQ8BlockSize * kQ8BlockBytes;
      quantize_q8_0({from, size_t(n)}, {blocks, size_t(bytes)});
      blocks += bytes;
    }
  }
}

FrozenParameters::WorkingSpace& FrozenParameters::working_space(int64_t unit) {
  return unit > dense_block_units_ ? expert_space_ : dense_space_;
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
    const Quantized& q = quantized_[unit - resident_units_];
    const uint8_t* blocks = q.blocks.data();
    const float* rest = q.rest.data();
    for (const Segment& s : q.segments) {
      const int64_t n = s.end - s.begin;
      if (s.q8_0) {
        const int64_t bytes = n / kQ8BlockSize * kQ8BlockBytes;
        dequantize_q8_0({blocks, size_t(bytes)}, {space.f32.data() + s.begin, size_t(n)});
        blocks += bytes;
      } else {
        std::copy(rest, rest + n, space.f32.begin() + s.begin);
        rest += n;
      }
    }
    if (low_) k::cast_to_low(ctx_, space.f32.data(), space.low.data(), u.size(), *low_);
    space.unit = unit;
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
