#include "tessera/core/tensor.h"

namespace tessera {

Shape::Shape(std::initializer_list<int64_t> dims) {
  check(dims.size() <= kMaxRank, "shape of rank {} exceeds the maximum rank {}", dims.size(),
        kMaxRank);
  for (int64_t d : dims) {
    check(d >= 0, "negative dimension {} in a shape", d);
    dims_[rank_++] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

}  // namespace tessera
