#include "tessera/model/adapter_bank.h"

#include "tessera/core/error.h"
#include "tessera/kernels/lora.h"
#include "tessera/model/moe_layer.h"

namespace tessera::model {

namespace {

// A down-projection's widest output: LoRA's A of every piece of the widest fused part.
int64_t widest_down(const ModelConfig& base, int64_t max_rank) {
  int64_t pieces = 1;
  for (const Part& p : block_spec(base).parts) {
    if (p.kind == PartKind::kLinear) pieces = std::max(pieces, int64_t(p.external.size()));
  }
  return pieces * max_rank;
}

}  // namespace

AdapterBank::AdapterBank(const ModelConfig& base, int64_t slots, int64_t max_rank,
                         int64_t max_tokens, const Sharding& sharding)
    : base_(base),
      sharding_{sharding.tp, sharding.tp_rank, sharding.ep, sharding.ep_rank},
      max_rank_(max_rank),
      max_tokens_(max_tokens),
      adapters_(size_t(slots)),
      u_(size_t(max_tokens * widest_down(base, max_rank))) {
  check(slots >= 1 && max_rank >= 1, "an adapter bank of {} slots of rank {}", slots, max_rank);
  segments_.reserve(size_t(max_tokens));
  check(!base.lora.enabled(), "the served model already carries LoRA adapters of its own");
}

void AdapterBank::check_fits(const ModelConfig& adapted) const {
  check(adapted.lora.enabled(), "the adapter has no LoRA settings");
  ModelConfig adapted_base = adapted;
  adapted_base.lora = {};
  check(adapted_base == base_, "the adapter was trained for another model than the one served");
  check(expert_lora_rank(adapted) == 0,
        "adapters of a mixture's experts are not served per request yet; serve the LoRA run "
        "itself, its adapters merged");
  check(adapted.lora.rank <= max_rank_, "the adapter's rank {} is above --max-lora-rank {}",
        adapted.lora.rank, max_rank_);
}

void AdapterBank::load(int64_t slot, const ModelConfig& adapted, std::span<const float> values) {
  check(slot >= 0 && slot < slots(), "adapter slot {} of {}", slot, slots());
  check_fits(adapted);
  const ModelLayout whole = model_layout(adapted);
  check(int64_t(values.size()) == whole.params.total() - whole.adapters_begin,
        "{} adapter values for a layout of {}", values.size(),
        whole.params.total() - whole.adapters_begin);
  Adapter a;
  a.layout = model_layout(adapted, sharding_);
  a.values.assign(size_t(a.layout.params.total() - a.layout.adapters_begin), 0.0f);
  for (const ParamInfo& p : a.layout.params.entries()) {
    if (p.offset < a.layout.adapters_begin) continue;
    p.placement.take(values.data() + (whole.params.find(p.name).offset - whole.adapters_begin),
                     a.values.data() + (p.offset - a.layout.adapters_begin), p.shape.numel());
  }
  a.scale = float(adapted.lora.scale());
  const AdapterTable& first = a.layout.adapters.front();
  for (const Part& p : a.layout.spec.block.adapters) {
    if (p.lora != LoraMatrix::kB) continue;
    const int64_t id = int(p.id);
    a.piece_rows[id] = local_piece_rows(p, a.layout.params.at_offset(first[p.id].b));
    a.in[id] = a.layout.params.at_offset(first[p.id].a).shape[1];
  }
  adapters_[size_t(slot)] = std::move(a);
}

void AdapterBank::unload(int64_t slot) {
  check(slot >= 0 && slot < slots(), "adapter slot {} of {}", slot, slots());
  adapters_[size_t(slot)].reset();
}

void AdapterBank::set_segments(std::span<const Segment> segments) {
  segments_.clear();
  for (const Segment& s : segments) {
    check(s.slot < slots() && s.row >= 0 && s.rows >= 0 && s.row + s.rows <= max_tokens_,
          "an adapter segment of rows [{}, {}) for slot {}", s.row, s.row + s.rows, s.slot);
    if (s.slot < 0 || s.rows == 0) continue;
    check(holds(s.slot), "adapter slot {} holds no adapter", s.slot);
    if (!segments_.empty() && segments_.back().slot == s.slot &&
        segments_.back().row + segments_.back().rows == s.row) {
      segments_.back().rows += s.rows;
    } else {
      segments_.push_back(s);
    }
  }
}

void AdapterBank::apply(int64_t layer, PartId part, const float* x, float* y) const {
  for (const Segment& s : segments_) {
    const Adapter& a = *adapters_[size_t(s.slot)];
    const AdapterOffsets& o = a.layout.adapters[size_t(layer)][part];
    if (!o.present()) continue;
    const float* values = a.values.data() - a.layout.adapters_begin;
    const std::vector<int64_t>& widths = a.piece_rows[int(part)];
    const int64_t r = a.layout.spec.block.lora_rank, cols = r * int64_t(widths.size());
    const int64_t in = a.in[int(part)];
    int64_t out = 0;
    for (int64_t w : widths) out += w;
    kernels::lora_down(kernels::kCpuContext, x + s.row * in, values + o.a, u_.data(), s.rows, in,
                       cols);
    kernels::lora_up(kernels::kCpuContext, u_.data(), values + o.b, y + s.row * out, s.rows, r,
                     std::span<const int64_t>(widths), a.scale);
  }
}

}  // namespace tessera::model
