// Tensors for write_safetensors from values the tests hold.
#pragma once

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "tessera/interop/safetensors.h"

namespace tessera::testing {

// A tensor whose data are `values`, which must outlive the write that reads them.
inline interop::SafetensorsTensor tensor_of(std::string name, std::vector<int64_t> shape,
                                            const std::vector<float>& values) {
  return {std::move(name), std::move(shape), [&values](std::span<float> out) {
            std::copy(values.begin(), values.end(), out.begin());
          }};
}

}  // namespace tessera::testing
