// The values a q8_0 frozen model reads back for its block matrices, for tests that compare it
// with a plain model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/q8_0.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// Rounds each block weight matrix of `params` (laid out as `layout`) through q8_0, in place.
inline void round_trip_q8_0_matrices(const ModelLayout& layout, std::span<float> params) {
  for (const PartTable& block : layout.blocks) {
    for (PartId id : {PartId::kQkv, PartId::kAttentionOut, PartId::kMlpIn, PartId::kMlpOut,
                      PartId::kExpertsIn, PartId::kExpertsOut}) {
      if (block[id].weight < 0) continue;
      const std::span<float> w =
          params.subspan(size_t(block[id].weight),
                         size_t(layout.params.at_offset(block[id].weight).shape.numel()));
      std::vector<uint8_t> blocks(w.size() / kQ8BlockSize * kQ8BlockBytes);
      quantize_q8_0(w, blocks);
      dequantize_q8_0(blocks, w);
    }
  }
}

}  // namespace tessera::model
