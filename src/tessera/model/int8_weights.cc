#include "tessera/model/int8_weights.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::model {

Int8Weights::Int8Weights(const ModelLayout& layout) : units_(layout.units) {
  const std::vector<int64_t> matrices = linear_weight_offsets(layout);
  int64_t values = 0, rows = 0;
  for (const ParamInfo& p : layout.params.entries()) {
    if (std::find(matrices.begin(), matrices.end(), p.offset) == matrices.end()) continue;
    const auto unit =
        std::upper_bound(units_.begin(), units_.end(), p.offset,
                         [](int64_t o, const ParameterUnit& u) { return o < u.begin; });
    const int64_t r = p.shape[0], c = p.shape[1];
    entries_.push_back({p.name, p.offset, r, c, int64_t(unit - units_.begin()) - 1, values, rows});
    values += r * c;
    rows += r;
  }
  q_.resize(values);
  scales_.resize(rows);
  stale_.assign(units_.size(), true);
}

void Int8Weights::refresh(int64_t unit, const float* f32) {
  if (!stale_[unit]) return;
  for (const Entry& e : entries_) {
    if (e.unit != unit) continue;
    const float* w = f32 + (e.offset - units_[unit].begin);
    check(kernels::all_finite(kernels::kCpuContext, w, e.rows * e.cols),
          "parameter {} holds inf or NaN and cannot be quantised to int8", e.name);
    kernels::quantize_int8_rows(w, e.rows, e.cols, q_.data() + e.q_at, scales_.data() + e.scale_at);
  }
  stale_[unit] = false;
}

kernels::Int8Matrix Int8Weights::matrix(int64_t offset) const {
  const auto e = std::lower_bound(entries_.begin(), entries_.end(), offset,
                                  [](const Entry& x, int64_t o) { return x.offset < o; });
  check(e != entries_.end() && e->offset == offset, "no int8 weight matrix at parameter offset {}",
        offset);
  check(!stale_[e->unit], "int8 weights of {} read before they were quantised", e->name);
  return {q_.data() + e->q_at, scales_.data() + e->scale_at, e->rows, e->cols};
}

}  // namespace tessera::model
