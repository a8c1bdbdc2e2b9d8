#pragma once

#include <cstdint>

#include "tessera/kernels/low_precision.h"
#include "tessera/model/model_config.h"

namespace tessera::model {

// f32: everything in f32. bf16 / f16: matmul operands (weights and the activations that feed
// matmuls) are stored in the low precision and multiplied with f32 accumulation; the residual
// stream, norms, attention, losses and master weights stay f32.
enum class Precision { kF32, kBf16, kF16 };
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::kF32, "f32"}, {Precision::kBf16, "bf16"}, {Precision::kF16, "f16"}};
constexpr const auto& enum_names(Precision) { return kPrecisionNames; }

// none: every block keeps what its backward needs. selective: norm outputs and MLP activation
// outputs are recomputed in backward (cheap elementwise work, a large share of the memory).
// full: only each block's input is kept; the block's forward runs again before its backward.
enum class Recompute { kNone, kSelective, kFull };
inline constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::kNone, "none"}, {Recompute::kSelective, "selective"}, {Recompute::kFull, "full"}};
constexpr const auto& enum_names(Recompute) { return kRecomputeNames; }

// How an inference model holds the weights its matmuls read. dense: as the precision says. int8:
// every linear layer's weight matrix, the head included, as int8 with one f32 scale per output
// row (symmetric, max|row| / 127), multiplied by the activations quantised per row the same way,
// with exact integer sums (kernels/int8_linear.h). q4_0: the same matrices in ggml's Q4_0 blocks
// of 32 weights with an f16 scale each, multiplied by activations quantised to int8 per block
// (kernels/q4_linear.h); their input widths must be multiples of 32, and the head stays int8.
// q4_k: in ggml's Q4_K super-blocks of 256 weights (kernels/q4k_linear.h); a matrix whose input
// width is not a multiple of 256 is held in q4_0, as llama.cpp falls back from Q4_K for such
// rows, and the head stays int8. In all three, the f32 parameters stay resident for the
// embeddings, norms and biases and as the source of the quantised copy; all need precision f32,
// dense MLPs, training=false and no parameter store.
// The names are those of the --quantize flag: "none" is dense.
enum class WeightFormat { kDense, kInt8, kQ4_0, kQ4_K };
inline constexpr EnumName<WeightFormat> kWeightFormatNames[] = {{WeightFormat::kDense, "none"},
                                                                {WeightFormat::kInt8, "int8"},
                                                                {WeightFormat::kQ4_0, "q4_0"},
                                                                {WeightFormat::kQ4_K, "q4_k"}};
constexpr const auto& enum_names(WeightFormat) { return kWeightFormatNames; }

// The matmul operand format of a low precision (bf16 or f16).
inline kernels::LowPrecision low_precision_of(Precision p) {
  return p == Precision::kF16 ? kernels::LowPrecision::kF16 : kernels::LowPrecision::kBf16;
}

}  // namespace tessera::model
