#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/huge_pages.h"
#include "tessera/kernels/context.h"
#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/q4_linear.h"
#include "tessera/kernels/q4k_linear.h"
#include "tessera/model/execution.h"
#include "tessera/model/model_layout.h"
#include "tessera/model/parameter_store.h"

namespace tessera::model {

// The quantised copy (WeightFormat::kInt8, kQ4_0 or kQ4_K) of every weight matrix an inference
// model multiplies by: each dense block's qkv, attention projection and MLP matrices, and the
// head (the token embedding when tied), which a 4-bit model holds in int8. Quantised a parameter unit at a
// time from the f32 parameters, on the first use after they were last written.
class QuantizedWeights {
 public:
  QuantizedWeights(const ModelLayout& layout, WeightFormat format);
  // Throws unless a model of `config` built with these options can hold quantised weights (dense
  // ones pass): an f32 model for inference, with dense MLPs, that keeps its own parameters.
  static void check_model(const ModelConfig& config, WeightFormat weights, Precision precision,
                          bool training, bool has_store);

  // The f32 parameters changed: every unit is quantised again on its next refresh.
  void mark_stale() { stale_.assign(stale_.size(), true); }
  // Quantises the unit's matrices if stale; f32 holds the unit's parameters from its first one.
  void refresh(int64_t unit, const float* f32);
  // y[N, rows] = x[N, cols] times the quantised matrix whose f32 parameter starts at offset in
  // the flat layout, transposed, + b (may be null); scratch as the format's kernel needs.
  void forward(const kernels::Context& ctx, int64_t offset, const float* x, const float* b,
               float* y, int64_t N, float* scratch) const;
  // Bytes of the quantised values and their scales.
  int64_t bytes() const { return bytes_; }
  // What `bytes` is for a layout, without building the copy.
  static int64_t bytes(const ModelLayout& layout, WeightFormat format);

 private:
  struct Entry {
    std::string name;
    int64_t offset, rows, cols, unit;
    WeightFormat format;           // as held: the model's, or int8 for a 4-bit model's head
    int64_t values_at, scales_at;  // where its values and scales start in values_ and scales_
  };
  const Entry& entry(int64_t offset) const;

  WeightFormat format_;
  std::vector<ParameterUnit> units_;
  std::vector<Entry> entries_;  // in offset order
  // int8 values, q4_0 nibbles or repacked q4_k super-blocks, from a cache line's start.
  std::unique_ptr<uint8_t, decltype(&free_large)> values_{nullptr, free_large};
  std::vector<float> row_scales_;       // int8: one per row
  std::vector<uint16_t> block_scales_;  // q4: f16, one per row and block of 32 columns
  std::vector<bool> stale_;             // per unit
  int64_t bytes_ = 0;
};

}  // namespace tessera::model
