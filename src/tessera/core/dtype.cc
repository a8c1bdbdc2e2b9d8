#include "tessera/core/dtype.h"

#include "tessera/core/error.h"

namespace tessera {

DType dtype_from_name(std::string_view name) {
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::i32}) {
    if (dtype_name(t) == name) return t;
  }
  fail("unknown dtype '{}' (expected f32, bf16, f16 or i32)", name);
}

}  // namespace tessera
