#pragma once

#include <span>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::model {

// Where a rank's copy of a parameter sits in the whole (unsharded) tensor, seen as a matrix of
// rows x cols (dimension 0 expanded by any stack: an expert stack [E, out, in] is E*out rows of
// in columns). The local tensor is the listed row segments, in order, each row cut to the columns
// [col_begin, col_begin + cols); rows past the last segment are padding that exists only locally
// (a vocabulary padded so tp divides it).
struct Placement {
  struct Rows {
    int64_t begin, count;
    int64_t copies = 1;  // tensor-parallel ranks holding these rows: tp when replicated
  };
  std::vector<Rows> rows;
  int64_t col_begin = 0, cols = 0;
  int64_t global_cols = 0;
  int64_t padding_rows = 0;

  int64_t local_rows() const;
  // The element of the global tensor (row-major) at local index i, or -1 for padding.
  int64_t global_index(int64_t i) const;
  // local[0, n) = the elements of the whole tensor `whole` (row-major) at those places, padding 0.
  void take(const float* whole, float* local, int64_t n) const;
  // Replicated: the whole tensor, as it is.
  static Placement whole(const Shape& shape);
};

// Where one named parameter lives inside a rank's flat parameter buffer. Gradients and optimizer
// moments use the same offsets in buffers of their own, so one call covers all of them.
struct ParamInfo {
  std::string name;
  Shape shape;  // this rank's shape
  int64_t offset = 0;
  bool decay = false;  // weight decay applies to matrices, never to norms or biases
  // The whole parameter, what each rank holds of it, and its place in the model's canonical
  // (unsharded) layout, whose entry index also seeds its initial values.
  Shape global_shape;
  Placement placement;
  int64_t global_offset = 0;
  int64_t global_index = 0;
  // Initial values: N(0, init_std) when init_std > 0, else all init_value.
  double init_std = 0, init_value = 0;
};

class ParameterLayout {
 public:
  // Adds a replicated parameter: global and local are the same.
  int64_t add(std::string name, Shape shape, bool decay);
  // Adds this rank's part of a sharded one; info's offset is set here.
  int64_t add(ParamInfo info);
  int64_t total() const { return total_; }
  const std::vector<ParamInfo>& entries() const { return entries_; }
  const ParamInfo& find(std::string_view name) const;
  const ParamInfo& at_offset(int64_t offset) const;

 private:
  std::vector<ParamInfo> entries_;
  int64_t total_ = 0;
};

// Views of each named parameter over a flat buffer of the layout's size, each name prefixed.
std::vector<NamedTensor> named_views(const ParameterLayout& layout, float* flat,
                                     std::string_view prefix = "");

}  // namespace tessera::model
