#pragma once

#include <cstdint>

namespace tessera::train {

// Dynamic loss scaling for f16: gradients are computed for scale * loss so that small values
// survive f16; a step whose gradients overflowed is skipped and the scale halves, and after
// growth_interval clean steps in a row the scale doubles.
class DynamicLossScaler {
 public:
  DynamicLossScaler(double initial_scale, int64_t growth_interval);

  double scale() const { return scale_; }
  // Records the outcome of one step's backward; returns whether the optimizer may step.
  bool update(bool grads_finite);
  int64_t skipped_steps() const { return skipped_; }
  // Whether the scale can fall no further: an overflow now is the gradients', not the scale's.
  bool at_floor() const;
  void restore(double scale, int64_t skipped);

 private:
  double scale_;
  int64_t growth_interval_;
  int64_t clean_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace tessera::train
