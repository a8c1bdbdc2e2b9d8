// Transformer::Access, the model's ParamAccess: what its layers read their parameters and
// gradients through. Only transformer.cc includes it.
#pragma once

#include <cstdint>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/model/transformer.h"

namespace tessera::model {

// The parameters and gradients of the units acquired now, by flat offset.
class Transformer::Access final : public ParamAccess {
 public:
  explicit Access(const Transformer& m) : m_(m) {}
  const float* f32(int64_t offset) const override {
    const int64_t u = unit_of(offset);
    return m_.weights_[u].f32 + (offset - m_.layout_.units[u].begin);
  }
  const uint16_t* low(int64_t offset) const override {
    const int64_t u = unit_of(offset);
    return m_.weights_[u].low + (offset - m_.layout_.units[u].begin);
  }
  // Null for a frozen parameter: its store keeps no gradients.
  float* grad(int64_t offset) const override {
    const int64_t u = unit_of(offset);
    float* unit = m_.unit_grads_[u];
    return unit == nullptr ? nullptr : unit + (offset - m_.layout_.units[u].begin);
  }
  const QuantizedWeights* quantized() const override { return m_.quantized_.get(); }

 private:
  int64_t unit_of(int64_t offset) const {
    const std::vector<ParameterUnit>& units = m_.layout_.units;
    for (size_t u = 0; u < units.size(); ++u) {
      if (offset >= units[u].begin && offset < units[u].end) return int64_t(u);
    }
    fail("parameter offset {} is in no unit", offset);
  }
  const Transformer& m_;
};

}  // namespace tessera::model
