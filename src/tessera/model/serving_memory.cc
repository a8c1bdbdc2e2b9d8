#include "tessera/model/serving_memory.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tessera/model/block.h"
#include "tessera/model/quantized_weights.h"

namespace tessera::model {

KvRows kv_rows(const ModelLayout& layout) {
  const BlockWidths w(layout.spec.block, layout.sharding);
  return {int64_t(layout.blocks.size()), w.kv_heads * w.head_dim};
}

int64_t inference_max_batch(const ModelConfig& config, int64_t max_step_tokens) {
  return std::max<int64_t>(1, (max_step_tokens + config.max_seq - 1) / config.max_seq);
}

int64_t resident_weight_bytes(const ModelLayout& layout, Precision precision,
                              WeightFormat weights) {
  const int64_t total = layout.params.total();
  return int64_t(sizeof(float)) * total + (precision != Precision::kF32 ? 2 * total : 0) +
         (weights != WeightFormat::kDense ? QuantizedWeights::bytes(layout, weights) : 0);
}

double MatmulWeightReads::per_step(double tokens) const {
  if (experts == 0) return dense;
  return dense + experts * (1 - std::pow(1 - expert_token_share, tokens));
}

MatmulWeightReads matmul_weight_reads(const ModelLayout& layout, Precision precision,
                                      WeightFormat weights) {
  // The matrices as this rank holds them: its tensor-parallel slices and its experts.
  std::unordered_map<int64_t, double> elements;  // by offset
  for (const ParamInfo& p : layout.params.entries()) elements[p.offset] = double(p.shape.numel());
  const double dense_bytes = precision != Precision::kF32 ? 2 : 4;
  MatmulWeightReads reads;
  double dense = 0;  // elements multiplied in the dense format
  for (const PartTable& block : layout.blocks) {
    for (const Part& p : layout.spec.block.parts) {
      if (p.kind != PartKind::kLinear) continue;
      const double matrix = elements.at(block[p.id].weight);
      if (p.role == Role::kExpert) {
        reads.experts += 4 * matrix;
        reads.expert_token_share = p.token_share;
      } else if (p.id == PartId::kRouter || p.id == PartId::kSharedIn ||
                 p.id == PartId::kSharedOut) {
        reads.dense += 4 * matrix;
      } else {
        dense += matrix;
      }
    }
  }
  if (weights != WeightFormat::kDense) {
    reads.dense += double(QuantizedWeights::bytes(layout, weights));
  } else {
    const double head = layout.has_head ? elements.at(layout.head_weight()) : 0;
    reads.dense += dense_bytes * (dense + head);
  }
  return reads;
}

}  // namespace tessera::model
