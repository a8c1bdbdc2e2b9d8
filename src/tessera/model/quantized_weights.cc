#include "tessera/model/quantized_weights.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::model {

namespace {

// Bytes of a matrix's values and, in scales' own units, its scales, in a quantised format.
struct MatrixSize {
  int64_t values, scales;
};

MatrixSize matrix_size(WeightFormat format, int64_t rows, int64_t cols) {
  switch (format) {
    case WeightFormat::kQ4_0:
      return {kernels::q4_nibble_bytes(rows, cols), kernels::q4_scale_count(rows, cols)};
    case WeightFormat::kQ4_K:
      return {kernels::q4k_bytes(rows, cols), 0};
    default:
      return {rows * cols, rows};
  }
}

int64_t scale_bytes(WeightFormat format) {
  return format == WeightFormat::kQ4_0 ? int64_t(sizeof(uint16_t)) : int64_t(sizeof(float));
}

// The format a matrix of a `format` model is held in. The head stays int8 in a 4-bit model: its
// errors move every logit directly, and llama.cpp likewise keeps the output matrix of its 4-bit
// files in 6 bits. A q4_k model holds a matrix whose rows are not whole super-blocks in q4_0.
WeightFormat held_format(WeightFormat format, bool head, int64_t cols) {
  if (head) return WeightFormat::kInt8;
  if (format == WeightFormat::kQ4_K && cols % kernels::kQ4KColumns != 0) return WeightFormat::kQ4_0;
  return format;
}

// The layout's quantised matrices: each linear weight, with its shape and the format it is held
// in.
template <typename Visit>
void for_each_matrix(const ModelLayout& layout, WeightFormat format, Visit visit) {
  const std::vector<int64_t> matrices = linear_weight_offsets(layout);
  const int64_t head = layout.has_head ? layout.head_weight() : -1;
  for (const ParamInfo& p : layout.params.entries()) {
    if (std::find(matrices.begin(), matrices.end(), p.offset) == matrices.end()) continue;
    visit(p, held_format(format, p.offset == head, p.shape[1]));
  }
}

}  // namespace

void QuantizedWeights::check_model(const ModelConfig& config, WeightFormat weights,
                                   Precision precision, bool training, bool has_store) {
  if (weights == WeightFormat::kDense) return;
  const std::string_view format = enum_name(weights);
  check(!training, "{} weights are for inference: build the model with training=false", format);
  check(!config.is_moe(),
        "{} weights need dense MLPs, but the model has {} experts (model.moe.n_experts)", format,
        config.moe.n_experts);
  check(precision == Precision::kF32,
        "{} weights multiply f32 activations: use precision f32 with them, not {}", format,
        enum_name(precision));
  check(!has_store,
        "{} weights are quantised from parameters the model keeps itself: build it without a "
        "parameter store",
        format);
}

int64_t QuantizedWeights::bytes(const ModelLayout& layout, WeightFormat format) {
  int64_t total = 0;
  for_each_matrix(layout, format, [&](const ParamInfo& p, WeightFormat held) {
    const MatrixSize size = matrix_size(held, p.shape[0], p.shape[1]);
    total += size.values + size.scales * scale_bytes(held);
  });
  return total;
}

QuantizedWeights::QuantizedWeights(const ModelLayout& layout, WeightFormat format)
    : format_(format), units_(layout.units) {
  check(format != WeightFormat::kDense, "QuantizedWeights needs a quantised format, not dense");
  int64_t values = 0, row_scales = 0, block_scales = 0;
  for_each_matrix(layout, format, [&](const ParamInfo& p, WeightFormat held) {
    const auto unit =
        std::upper_bound(units_.begin(), units_.end(), p.offset,
                         [](int64_t o, const ParameterUnit& u) { return o < u.begin; });
    const int64_t r = p.shape[0], c = p.shape[1];
    check(held != WeightFormat::kQ4_0 || c % kernels::kQ4BlockColumns == 0,
          "{} weights are quantised in blocks of {} columns, but {} has {} columns",
          enum_name(format), kernels::kQ4BlockColumns, p.name, c);
    int64_t& scales = held == WeightFormat::kQ4_0 ? block_scales : row_scales;
    entries_.push_back(
        {p.name, p.offset, r, c, int64_t(unit - units_.begin()) - 1, held, values, scales});
    const MatrixSize size = matrix_size(held, r, c);
    values += size.values;
    scales += size.scales;
  });
  values_.reset(static_cast<uint8_t*>(allocate_large(size_t(std::max<int64_t>(values, 1)))));
  row_scales_.resize(size_t(row_scales));
  block_scales_.resize(size_t(block_scales));
  bytes_ = values + row_scales * scale_bytes(WeightFormat::kInt8) +
           block_scales * scale_bytes(WeightFormat::kQ4_0);
  stale_.assign(units_.size(), true);
}

void QuantizedWeights::refresh(int64_t unit, const float* f32) {
  if (!stale_[unit]) return;
  for (const Entry& e : entries_) {
    if (e.unit != unit) continue;
    const float* w = f32 + (e.offset - units_[unit].begin);
    check(kernels::all_finite(kernels::kCpuContext, w, e.rows * e.cols),
          "parameter {} holds inf or NaN and cannot be quantised to {}", e.name,
          enum_name(e.format));
    if (e.format == WeightFormat::kQ4_K) {
      kernels::quantize_q4k_rows(w, e.rows, e.cols, values_.get() + e.values_at);
    } else if (e.format == WeightFormat::kQ4_0) {
      kernels::quantize_q4_rows(w, e.rows, e.cols, values_.get() + e.values_at,
                                block_scales_.data() + e.scales_at);
    } else {
      kernels::quantize_int8_rows(w, e.rows, e.cols,
                                  reinterpret_cast<int8_t*>(values_.get() + e.values_at),
                                  row_scales_.data() + e.scales_at);
    }
  }
  stale_[unit] = false;
}

const QuantizedWeights::Entry& QuantizedWeights::entry(int64_t offset) const {
  const auto e = std::lower_bound(entries_.begin(), entries_.end(), offset,
                                  [](const Entry& x, int64_t o) { return x.offset < o; });
  check(e != entries_.end() && e->offset == offset, "no {} weight matrix at parameter offset {}",
        enum_name(format_), offset);
  check(!stale_[e->unit], "{} weights of {} read before they were quantised", enum_name(format_),
        e->name);
  return *e;
}

void QuantizedWeights::forward(const kernels::Context& ctx, int64_t offset, const float* x,
                               const float* b, float* y, int64_t N, float* scratch) const {
  const Entry& e = entry(offset);
  if (e.format == WeightFormat::kQ4_K) {
    kernels::linear_forward_q4k(ctx, x, {values_.get() + e.values_at, e.rows, e.cols}, b, y, N,
                                scratch);
  } else if (e.format == WeightFormat::kQ4_0) {
    const kernels::Q4Matrix w{values_.get() + e.values_at, block_scales_.data() + e.scales_at,
                              e.rows, e.cols};
    kernels::linear_forward_q4(ctx, x, w, b, y, N, scratch);
  } else {
    const kernels::Int8Matrix w{reinterpret_cast<const int8_t*>(values_.get() + e.values_at),
                                row_scales_.data() + e.scales_at, e.rows, e.cols};
    kernels::linear_forward_int8(ctx, x, w, b, y, N, scratch);
  }
}

}  // namespace tessera::model
