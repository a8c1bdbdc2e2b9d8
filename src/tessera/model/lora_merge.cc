#include "tessera/model/lora_merge.h"

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

MergedModel merge_lora(const ModelConfig& adapted, std::span<const float> params) {
  const ModelLayout layout = model_layout(adapted);
  check(int64_t(params.size()) == layout.params.total(),
        "merge_lora: {} parameters for a layout of {}", params.size(), layout.params.total());
  MergedModel merged{adapted, {params.begin(), params.begin() + layout.adapters_begin}};
  merged.config.lora = {};
  const BlockSpec& spec = layout.spec.block;
  const float scale = float(spec.lora_scale);
  const int64_t r = spec.lora_rank;
  for (size_t l = 0; l < layout.adapters.size(); ++l) {
    for (const Part& b : spec.adapters) {
      if (b.lora != LoraMatrix::kB) continue;
      const AdapterOffsets& o = layout.adapters[l][b.id];
      const int64_t in = spec.part(b.id).in, out = b.out;
      const std::vector<int64_t> widths = lora_piece_rows(b);
      const int64_t pieces = int64_t(widths.size());
      for (int64_t e = 0; e < b.stack; ++e) {  // each expert of a stack: its own adapter
        float* w = merged.params.data() + layout.blocks[l][b.id].weight + e * out * in;
        const float* a = params.data() + o.a + e * pieces * r * in;
        const float* up = params.data() + o.b + e * out * r;
        int64_t row = 0;
        for (int64_t j = 0; j < pieces; ++j) {
          // W_j [w, in] += scale B_j [w, r] A_j [r, in]
          kernels::gemm<float>(kernels::kCpuContext, false, false, widths[j], in, r, scale,
                               up + row * r, r, a + j * r * in, in, 1.0f, w + row * in, in);
          row += widths[j];
        }
      }
    }
  }
  return merged;
}

}  // namespace tessera::model
