#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "tessera/model/block_spec.h"
#include "tessera/model/model_config.h"
#include "tessera/model/parameters.h"

namespace tessera::model {

// Which part of the model this rank holds: its tensor-parallel and expert-parallel coordinates,
// and the blocks [block_begin, block_end) of its pipeline stage (block_end -1: through the last
// block). The stage that starts at block 0 holds the embedding, the one that ends with the last
// block the head.
struct Sharding {
  int64_t tp = 1, tp_rank = 0;
  int64_t ep = 1, ep_rank = 0;
  int64_t block_begin = 0, block_end = -1;
};

// Throws an Error naming the mesh key and the model key at fault when tensor or expert
// parallelism of these degrees cannot split the model: heads, kv heads (split when tp divides
// them, replicated when tp is a multiple of them), the MLP width or the experts.
void check_sharding(const ModelConfig& config, int64_t tp, int64_t ep);

// How the tensor-parallel ranks split the vocabulary: padded to a multiple of tp, each rank
// holding `local` consecutive ids from `begin` (the last ranks' tails being padding).
struct VocabShard {
  int64_t padded = 0, local = 0, begin = 0;
  int64_t real() const;  // ids of [begin, begin + local) inside the true vocabulary
  int64_t vocab_size = 0;
};
VocabShard vocab_shard(int64_t vocab_size, const Sharding& sharding);

inline constexpr int kPartIdCount = int(PartId::kHead) + 1;

// A part's weight and bias offsets in the flat layout; -1 when it has none.
struct PartOffsets {
  int64_t weight = -1, bias = -1;
};
struct PartTable {
  std::array<PartOffsets, kPartIdCount> parts;
  const PartOffsets& operator[](PartId id) const { return parts[int(id)]; }
  PartOffsets& operator[](PartId id) { return parts[int(id)]; }
};

// The offsets of a LoRA adapter's A and B in the flat layout; -1 when the part has none.
struct AdapterOffsets {
  int64_t a = -1, b = -1;
  bool present() const { return a >= 0; }
};
struct AdapterTable {
  std::array<AdapterOffsets, kPartIdCount> parts;
  const AdapterOffsets& operator[](PartId id) const { return parts[int(id)]; }
  AdapterOffsets& operator[](PartId id) { return parts[int(id)]; }
};

// A contiguous range of the flat parameter layout that the model uses as a whole. Unit 0 holds
// the embeddings and the head (lnf, lm_head), which the model needs at both ends of a step; unit
// 1 + l holds the layout's block l's dense parts and, in a mixture of experts, unit 1 + blocks + l
// its expert stacks, which sit after every dense part because their ranks replicate them
// differently (over dp / ep rather than dp). LoRA adapters come last, a unit per block, as the
// only trained state of such a run. A pipeline stage's unit 0 holds what it has of the embedding
// and head, possibly nothing.
struct ParameterUnit {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

struct ModelLayout {
  ParameterLayout params;  // this rank's parameters
  PartTable outer;         // the embedding and head parts
  // The stage's blocks, model block first_block + l at l. The first stage has the embedding, the
  // last the head; with a tied head, the last stage of several holds its own copy of wte.
  std::vector<PartTable> blocks;
  int64_t first_block = 0;
  bool has_embedding = true, has_head = true;
  std::vector<ParameterUnit> units;
  // The first expert-stack offset, the first adapter offset (after the expert stacks), and the
  // first offset of the expert stacks' adapters (after the dense parts'); each the next when
  // there are none, the last params.total() without them.
  int64_t experts_begin = 0, adapters_begin = 0, expert_adapters_begin = 0;
  std::vector<AdapterTable> adapters;  // per block, as `blocks`
  // The units of the dense parts' adapters, then of the expert stacks', one per block each.
  int64_t first_adapter_unit = 0, first_expert_adapter_unit = 0;
  Sharding sharding;
  VocabShard vocab;
  ModelSpec spec;

  int64_t head_weight() const;  // lm_head, or wte when tied
  int64_t expert_unit(int64_t layer) const { return 1 + int64_t(blocks.size()) + layer; }
  bool has_experts() const { return experts_begin < adapters_begin; }
  bool has_adapters() const { return adapters_begin < params.total(); }
  // The parameters a run trains, as ZeRO shards them: the dense ones over dp (a LoRA run's
  // adapters alone) and the expert stacks over dp / ep. A LoRA run holds the rest frozen, whole on
  // every rank (FrozenParameters).
  int64_t trained_dense() const {
    return has_adapters() ? expert_adapters_begin - adapters_begin : experts_begin;
  }
  int64_t trained_experts() const {
    return has_adapters() ? params.total() - expert_adapters_begin : adapters_begin - experts_begin;
  }
  // The units block `layer` reads: its dense parts', then its expert stacks', its dense parts'
  // adapters' and its expert stacks' adapters' where it has them (-1 otherwise).
  std::array<int64_t, 4> block_units(int64_t layer) const;
};

// The parts of a block that are dense linear layers.
inline constexpr std::array<PartId, 4> kDenseLinearParts = {PartId::kQkv, PartId::kAttentionOut,
                                                            PartId::kMlpIn, PartId::kMlpOut};

// The weight matrices of the dense linear layers, by offset in layout.params: the head's (the token
// embedding when tied), then each block's kDenseLinearParts. A
// low-precision run multiplies by their low-precision copy; int8 inference quantises them.
std::vector<int64_t> linear_weight_offsets(const ModelLayout& layout);

// The parameters a low-precision run reads in f32, as [begin, end) offset ranges within
// [begin, end) of layout.params, in order: everything but the linear weights above, whose f32
// values only the optimizer's master copy needs; the token embedding stays, since the lookup
// reads it in f32 (and the tied head its low-precision copy).
std::vector<std::pair<int64_t, int64_t>> f32_read_ranges(const ModelLayout& layout, int64_t begin,
                                                         int64_t end);

// The one definition of every parameter's name, shape and place, derived from model_spec(). Names:
//   wte.weight, wpe.weight (GPT-2), lnf.weight, lnf.bias (GPT-2), lm_head.weight (untied), and
//   per block "blocks.{l}." + each part's name + ".weight" / ".bias".
// Unsharded (the default), the layout is the model's canonical one, in which checkpoints place
// every tensor; sharded (over tp, ep or pipeline stages), it holds this rank's slices, each with
// its placement in the whole.
ModelLayout model_layout(const ModelConfig& config, const Sharding& sharding = {});

// This rank's rows of each piece of an adapter's B (`b`, its part; `info`, its tensor here): all
// of its rows for one piece, else each piece's rows whole (unsharded) or the segment of each that
// tensor parallelism gives the rank.
std::vector<int64_t> local_piece_rows(const Part& b, const ParamInfo& info);

// The canonical layout itself: unsharded, each mixture's expert stacks inside their blocks. It is
// where checkpoints written by one rank, or as ZeRO shards of one flat buffer, place their tensors.
ModelLayout canonical_model_layout(const ModelConfig& config);

// Parameter count; the tied embedding counts once. With MoE, active counts top_k routed experts
// per token instead of all of them.
struct ParameterCount {
  int64_t total = 0;
  int64_t active = 0;
};
ParameterCount count_parameters(const ModelConfig& config);

}  // namespace tessera::model
