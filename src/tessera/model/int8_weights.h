#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/kernels/int8_linear.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parameter_store.h"

namespace tessera::model {

// The int8 copy (WeightFormat::kInt8) of every weight matrix an inference model multiplies by:
// each dense block's qkv, attention projection and MLP matrices, and the head (the token
// embedding when tied). Quantised a parameter unit at a time from the f32 parameters, on the
// first use after they were last written.
class Int8Weights {
 public:
  explicit Int8Weights(const ModelLayout& layout);

  // The f32 parameters changed: every unit is quantised again on its next refresh.
  void mark_stale() { stale_.assign(stale_.size(), true); }
  // Quantises the unit's matrices if stale; f32 holds the unit's parameters from its first one.
  void refresh(int64_t unit, const float* f32);
  // The quantised matrix whose f32 parameter starts at offset in the flat layout.
  kernels::Int8Matrix matrix(int64_t offset) const;
  // Bytes of the int8 values and their scales.
  int64_t bytes() const { return int64_t(q_.size() + sizeof(float) * scales_.size()); }

 private:
  struct Entry {
    std::string name;
    int64_t offset, rows, cols, unit;
    int64_t q_at, scale_at;  // where its values and scales start in q_ and scales_
  };
  std::vector<ParameterUnit> units_;
  std::vector<Entry> entries_;  // in offset order
  std::vector<int8_t> q_;
  std::vector<float> scales_;
  std::vector<bool> stale_;  // per unit
};

}  // namespace tessera::model
