#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tessera/model/block_spec.h"
#include "tessera/model/model_layout.h"

namespace tessera::model {

// LoRA adapters a served model applies per request, S-LoRA style: up to `slots` adapters (each of
// rank at most max_rank, on any of a block's dense linears) held beside one base model, each
// applied to the rows of the sequences that asked for it, in the same batch as the rows of other
// adapters and of the base; the base's weights are never touched. Split over tensor-parallel ranks
// (`sharding`), a rank holds its slice of each adapter, split like the linear it adapts (as in
// training, lora_adapter.h): a row-parallel linear's update, from its columns of the input, adds
// to the partial sums the ranks complete. A pipeline stage holds every block's adapters.
class AdapterBank {
 public:
  // Consecutive rows of a forward that one slot's adapter (or none, slot -1) applies to.
  struct Segment {
    int64_t row = 0, rows = 0;
    int32_t slot = -1;
  };

  AdapterBank(const ModelConfig& base, int64_t slots, int64_t max_rank, int64_t max_tokens,
              const Sharding& sharding = {});

  int64_t slots() const { return int64_t(adapters_.size()); }
  // Whether `slot` is one of the bank's and holds an adapter.
  bool holds(int64_t slot) const {
    return slot >= 0 && slot < slots() && adapters_[size_t(slot)].has_value();
  }
  // Puts the adapters of `adapted` (the base model with its lora settings) in `slot`: `values`
  // are the range [adapters_begin, total) of the canonical model_layout(adapted), of which the
  // bank keeps this rank's slice. Throws naming what does not fit: another model, a rank above
  // max_rank.
  void load(int64_t slot, const ModelConfig& adapted, std::span<const float> values);
  // Throws unless an adapter of these settings fits the bank (load's checks before its values).
  void check_fits(const ModelConfig& adapted) const;
  // Empties `slot`, which no forward may be running with.
  void unload(int64_t slot);

  // Which slot each row of the next forwards belongs to: rows not covered run the base alone.
  void set_segments(std::span<const Segment> segments);
  // y [N, out] of block `layer`'s linear `part` += each segment's adapter update of x [N, in].
  void apply(int64_t layer, PartId part, const float* x, float* y) const;

 private:
  struct Adapter {
    ModelLayout layout;         // this rank's
    std::vector<float> values;  // from layout.adapters_begin
    float scale = 0;
    // Of each adapted part on this rank: its rows of each piece, and its input's width.
    std::array<std::vector<int64_t>, kPartIdCount> piece_rows;
    std::array<int64_t, kPartIdCount> in{};
  };
  ModelConfig base_;
  Sharding sharding_;
  int64_t max_rank_, max_tokens_;
  std::vector<std::optional<Adapter>> adapters_;
  std::vector<Segment> segments_;
  mutable std::vector<float> u_;  // [max_tokens, the widest down-projection]
};

}  // namespace tessera::model
