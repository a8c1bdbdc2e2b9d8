#pragma once

#include <span>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::model {

// Where one named parameter lives inside the flat parameter buffer. Gradients and optimizer
// moments use the same offsets in buffers of their own, so one call covers all of them.
struct ParamInfo {
  std::string name;
  Shape shape;
  int64_t offset = 0;
  bool decay = false;  // weight decay applies to matrices, never to norms or biases
};

class ParameterLayout {
 public:
  int64_t add(std::string name, Shape shape, bool decay);
  int64_t total() const { return total_; }
  const std::vector<ParamInfo>& entries() const { return entries_; }
  const ParamInfo& find(std::string_view name) const;

 private:
  std::vector<ParamInfo> entries_;
  int64_t total_ = 0;
};

// Views of each named parameter over a flat buffer of the layout's size, each name prefixed.
std::vector<NamedTensor> named_views(const ParameterLayout& layout, float* flat,
                                     std::string_view prefix = "");

}  // namespace tessera::model
