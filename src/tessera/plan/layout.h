#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tessera/model/execution.h"

namespace tessera::plan {

// How a training run spreads over its chips: data, tensor, pipeline and expert parallel degrees
// (dp * tp * pp chips; the expert-parallel ranks come out of the data-parallel ones), the ZeRO
// stage over dp, sequences per micro-batch, activation recomputation and the virtual pipeline
// stages per rank of an interleaved schedule. Tensor parallelism is sequence-parallel (the
// engine's mesh.sequence_parallel) unless sp=0.
struct Layout {
  int64_t dp = 1, tp = 1, pp = 1, ep = 1;
  int zero = 1;
  int64_t micro_batch = 1;
  model::Recompute recompute = model::Recompute::kSelective;
  int64_t vpp = 1;
  bool sequence_parallel = true;
  // Context parallelism: each sequence split over cp ranks, which exchange keys and values for
  // attention (ring attention, as Megatron-LM and torchtitan run it); a planning dimension the
  // engine does not train with.
  int64_t cp = 1;
  // The share of blocks that recompute with `recompute`, in (0, 1]; the others keep everything.
  double recompute_fraction = 1;

  int64_t chips() const { return dp * tp * pp * cp; }
  // "dp=64,tp=8,pp=4,ep=1,zero=1,mb=1,recompute=selective,vpp=1,sp=1", the form parse_layout
  // reads, with ",cp=N" where cp > 1 and ",rf=F" where F < 1.
  std::string str() const;
};

// Reads "key=value" pairs separated by commas, keys as in Layout::str(); missing keys keep their
// defaults. Errors name the bad pair.
Layout parse_layout(std::string_view text);

}  // namespace tessera::plan
