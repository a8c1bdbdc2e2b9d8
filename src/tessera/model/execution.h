#pragma once

#include <cstdint>
#include <string_view>

#include "tessera/kernels/low_precision.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// f32: everything in f32. bf16 / f16: matmul operands (weights and the activations that feed
// matmuls) are stored in the low precision and multiplied with f32 accumulation; the residual
// stream, norms, attention, losses and master weights stay f32.
enum class Precision { kF32, kBf16, kF16 };
// none: every block keeps what its backward needs. selective: norm outputs and MLP activation
// outputs are recomputed in backward (cheap elementwise work, a large share of the memory).
// full: only each block's input is kept; the block's forward runs again before its backward.
enum class Recompute { kNone, kSelective, kFull };
// How an inference model holds the weights its matmuls read. dense: as the precision says. int8:
// every linear layer's weight matrix, the head included, as int8 with one f32 scale per output
// row (symmetric, max|row| / 127), multiplied by the activations quantised per row the same way,
// with exact integer sums (kernels/int8_linear.h); the f32 parameters stay resident for the
// embeddings, norms and biases and as the source of the int8 copy. int8 needs precision f32,
// dense MLPs, training=false and no parameter store.
enum class WeightFormat { kDense, kInt8 };

std::string_view precision_name(Precision p);
Precision precision_from_name(std::string_view name);  // throws naming train.precision
std::string_view recompute_name(Recompute r);
Recompute recompute_from_name(std::string_view name);  // throws naming train.recompute
std::string_view weight_format_name(WeightFormat f);
WeightFormat weight_format_from_name(std::string_view name);

// The matmul operand format of a low precision (bf16 or f16).
inline kernels::LowPrecision low_precision_of(Precision p) {
  return p == Precision::kF16 ? kernels::LowPrecision::kF16 : kernels::LowPrecision::kBf16;
}

}  // namespace tessera::model
