#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"

namespace tessera {

// Up to four dimensions, stored inline so that building a shape never allocates.
class Shape {
 public:
  static constexpr int kMaxRank = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t numel() const;
  std::string str() const;
  bool operator==(const Shape& other) const;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// A non-owning view of contiguous memory, usually a slice of an Arena.
struct Tensor {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

  template <typename T>
  T* as() const {
    check(dtype_of<T>() == dtype, "tensor of dtype {} read as {}", enum_name(dtype),
          enum_name(dtype_of<T>()));
    return static_cast<T*>(data);
  }

 private:
  template <typename T>
  static constexpr DType dtype_of() {
    if constexpr (std::is_same_v<T, float>) return DType::f32;
    if constexpr (std::is_same_v<T, uint16_t>) return DType::bf16;
    if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  }
};

// A tensor view with the name it is saved and loaded under.
struct NamedTensor {
  std::string name;
  Tensor tensor;
};

}  // namespace tessera
