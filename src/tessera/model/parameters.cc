#include "tessera/model/parameters.h"

#include <algorithm>

namespace tessera::model {

namespace {
// Keeps every parameter 64-byte aligned inside the flat buffer.
constexpr int64_t kAlignFloats = 16;
}  // namespace

int64_t Placement::local_rows() const {
  int64_t n = padding_rows;
  for (const Rows& r : rows) n += r.count;
  return n;
}

int64_t Placement::global_index(int64_t i) const {
  int64_t row = i / cols;
  const int64_t col = col_begin + i % cols;
  for (const Rows& r : rows) {
    if (row < r.count) return (r.begin + row) * global_cols + col;
    row -= r.count;
  }
  return -1;
}

void Placement::take(const float* whole, float* local, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = global_index(i);
    local[i] = g >= 0 ? whole[g] : 0.0f;
  }
}

Placement Placement::whole(const Shape& shape) {
  const int64_t cols = shape.rank() >= 2 ? shape[shape.rank() - 1] : 1;
  Placement p;
  p.rows = {{0, shape.numel() / std::max<int64_t>(cols, 1)}};
  p.cols = p.global_cols = cols;
  return p;
}

int64_t ParameterLayout::add(std::string name, Shape shape, bool decay) {
  ParamInfo info;
  info.name = std::move(name);
  info.shape = shape;
  info.decay = decay;
  info.global_shape = shape;
  info.placement = Placement::whole(shape);
  info.global_offset = total_;
  info.global_index = int64_t(entries_.size());
  return add(std::move(info));
}

int64_t ParameterLayout::add(ParamInfo info) {
  info.offset = total_;
  total_ += (info.shape.numel() + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  entries_.push_back(std::move(info));
  return entries_.back().offset;
}

const ParamInfo& ParameterLayout::find(std::string_view name) const {
  for (const ParamInfo& p : entries_) {
    if (p.name == name) return p;
  }
  fail("no parameter named '{}'", name);
}

const ParamInfo& ParameterLayout::at_offset(int64_t offset) const {
  for (const ParamInfo& p : entries_) {
    if (p.offset == offset) return p;
  }
  fail("no parameter at offset {}", offset);
}

std::vector<NamedTensor> named_views(const ParameterLayout& layout, float* flat,
                                     std::string_view prefix) {
  std::vector<NamedTensor> views;
  for (const ParamInfo& p : layout.entries()) {
    views.push_back({std::string(prefix) + p.name, Tensor{flat + p.offset, p.shape, DType::f32}});
  }
  return views;
}

}  // namespace tessera::model
