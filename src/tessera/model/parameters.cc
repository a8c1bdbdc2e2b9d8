#include "tessera/model/parameters.h"

namespace tessera::model {

namespace {
// Keeps every parameter 64-byte aligned inside the flat buffer.
constexpr int64_t kAlignFloats = 16;
}  // namespace

int64_t ParameterLayout::add(std::string name, Shape shape, bool decay) {
  int64_t offset = total_;
  total_ += (shape.numel() + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  entries_.push_back({std::move(name), shape, offset, decay});
  return offset;
}

const ParamInfo& ParameterLayout::find(std::string_view name) const {
  for (const ParamInfo& p : entries_) {
    if (p.name == name) return p;
  }
  fail("no parameter named '{}'", name);
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
