#include "tessera/model/model_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "tessera/core/error.h"

namespace tessera::model {

int64_t VocabShard::real() const { return std::clamp<int64_t>(vocab_size - begin, 0, local); }

VocabShard vocab_shard(int64_t vocab_size, const Sharding& s) {
  VocabShard v;
  v.vocab_size = vocab_size;
  v.padded = (vocab_size + s.tp - 1) / s.tp * s.tp;
  v.local = v.padded / s.tp;
  v.begin = s.tp_rank * v.local;
  return v;
}

void check_sharding(const ModelConfig& c, int64_t tp, int64_t ep) {
  check(tp >= 1 && ep >= 1, "mesh.tp and mesh.ep must be >= 1, got {} and {}", tp, ep);
  if (tp > 1) {
    check(c.n_head % tp == 0,
          "mesh.tp = {} does not divide model.n_head = {}: every rank needs "
          "whole attention heads",
          tp, c.n_head);
    const int64_t kv = c.kv_heads();
    check(kv % tp == 0 || tp % kv == 0,
          "mesh.tp = {} and model.n_kv_head = {}: key/value heads are split when tp divides them "
          "and replicated when tp is a multiple of them; choose tp that does one or the other",
          tp, kv);
    check(c.ffn() % tp == 0, "mesh.tp = {} does not divide the MLP width {} (model.ffn_hidden)", tp,
          c.ffn());
  }
  if (ep > 1) {
    check(c.is_moe(), "mesh.ep = {} needs a mixture-of-experts model (model.moe_experts > 0)", ep);
    check(c.moe.n_experts % ep == 0,
          "mesh.ep = {} does not divide model.moe_experts = {}: every rank needs whole experts", ep,
          c.moe.n_experts);
  }
}

namespace {

// One parameter of a part: its global shape and this rank's placement in it.
struct Slice {
  Shape global, local;
  Placement placement;
};

// The output rows a column part's rank holds, part by part (q, k and v heads; gate and up).
std::vector<Placement::Rows> column_rows(const Part& p, const Sharding& s,
                                         const AttentionGeometry& attention) {
  std::vector<int64_t> widths = p.out_parts.empty() ? std::vector<int64_t>{p.out} : p.out_parts;
  std::vector<Placement::Rows> rows;
  int64_t begin = 0;
  for (size_t j = 0; j < widths.size(); ++j) {
    const int64_t units = widths[j] / p.out_unit;
    // Key and value heads (the qkv part's second and third) are replicated when tp exceeds them.
    const bool kv = p.id == PartId::kQkv && j > 0;
    if (kv && attention.kv_heads < s.tp) {
      const int64_t head = s.tp_rank * units / s.tp;
      rows.push_back({begin + head * p.out_unit, p.out_unit, s.tp / units});
    } else {
      const int64_t per = units / s.tp;
      rows.push_back({begin + s.tp_rank * per * p.out_unit, per * p.out_unit});
    }
    begin += widths[j];
  }
  return rows;
}

Slice slice_of(const Part& p, bool bias, const Sharding& s, const ModelSpec& m) {
  Slice out;
  if (p.kind == PartKind::kNorm) {
    out.global = out.local = {p.in};
  } else if (bias) {
    out.global = {p.out};
  } else if (p.stack > 1) {
    out.global = {p.stack, p.out, p.in};
  } else {
    out.global = {p.out, p.in};
  }
  Placement& pl = out.placement;
  pl = Placement::whole(out.global);
  const Role role = p.kind == PartKind::kNorm ? Role::kReplicated : p.role;
  if (s.tp > 1 && role == Role::kColumn) {
    pl.rows = column_rows(p, s, m.block.attention);
  } else if (s.tp > 1 && role == Role::kRow && !bias) {
    pl.cols = p.in / s.tp;
    pl.col_begin = s.tp_rank * pl.cols;
  } else if (role == Role::kVocab) {
    const VocabShard v = vocab_shard(p.out, s);
    pl.rows = {{v.begin, v.real()}};
    pl.padding_rows = v.local - v.real();
  } else if (s.ep > 1 && role == Role::kExpert) {
    const int64_t per = p.stack / s.ep;
    pl.rows = {{s.ep_rank * per * p.out, per * p.out}};
  }
  // Whatever the tensor-parallel ranks do not split, each of them holds.
  const bool tp_whole =
      role == Role::kReplicated || role == Role::kExpert || (role == Role::kRow && bias);
  if (tp_whole) {
    for (Placement::Rows& r : pl.rows) r.copies = s.tp;
  }
  // The local shape follows the placement: its rows, and the last dimension cut to its columns.
  const int64_t local_rows = pl.local_rows();
  if (out.global.rank() == 1) {
    out.local = {local_rows};
  } else if (out.global.rank() == 2) {
    out.local = {local_rows, pl.cols};
  } else {
    out.local = {local_rows / p.out, p.out, pl.cols};
  }
  return out;
}

struct Builder {
  const ModelSpec& spec;
  const Sharding& sharding;
  const std::map<std::string, std::pair<int64_t, int64_t>>& canonical;  // name -> offset, index
  ModelLayout& layout;

  // Adds the part's weight (and bias); returns their offsets.
  PartOffsets add(const Part& p, const std::string& prefix) {
    PartOffsets o;
    o.weight = add_one(p, prefix + p.name + ".weight", false);
    if (p.bias) o.bias = add_one(p, prefix + p.name + ".bias", true);
    return o;
  }

  int64_t add_one(const Part& p, const std::string& name, bool bias) {
    const Slice s = slice_of(p, bias, sharding, spec);
    ParamInfo info;
    info.name = name;
    info.shape = s.local;
    info.decay = !bias && p.kind != PartKind::kNorm;
    if (!bias && p.init == Init::kOnes) {
      info.init_value = 1;
    } else if (p.init == Init::kLoraDown) {
      info.init_std = 1.0 / std::sqrt(3.0 * double(p.in));
    } else if (!bias && p.kind != PartKind::kNorm && p.init != Init::kZeros) {
      info.init_std =
          p.init == Init::kResidual ? 0.02 / std::sqrt(2.0 * double(spec.n_layer)) : 0.02;
    }
    info.global_shape = s.global;
    info.placement = s.placement;
    const auto it = canonical.find(name);
    if (it != canonical.end()) {
      std::tie(info.global_offset, info.global_index) = it->second;
    } else {  // this is the canonical layout itself
      info.global_offset = layout.params.total();
      info.global_index = int64_t(layout.params.entries().size());
    }
    return layout.params.add(std::move(info));
  }
};

ModelLayout build(const ModelConfig& c, const Sharding& sharding,
                  const std::map<std::string, std::pair<int64_t, int64_t>>& canonical) {
  ModelLayout m;
  m.spec = model_spec(c);
  m.sharding = sharding;
  m.vocab = vocab_shard(c.vocab_size, sharding);
  const int64_t end = sharding.block_end < 0 ? c.n_layer : sharding.block_end;
  m.first_block = sharding.block_begin;
  m.has_embedding = m.first_block == 0;
  m.has_head = end == c.n_layer;
  Builder b{m.spec, sharding, canonical, m};
  if (m.has_embedding) {
    for (const Part& p : m.spec.embedding) m.outer[p.id] = b.add(p, "");
  }
  if (m.has_head) {
    if (m.spec.tied_head && !m.has_embedding) {
      const Part& wte = m.spec.embedding.front();
      m.outer[wte.id] = b.add(wte, "");
    }
    for (const Part& p : m.spec.head) m.outer[p.id] = b.add(p, "");
  }
  // Canonically the expert stacks sit inside their blocks; sharded they follow every dense part.
  const bool experts_last = sharding.tp > 1 || sharding.ep > 1 || !canonical.empty();
  m.blocks.resize(end - m.first_block);
  const int64_t n = int64_t(m.blocks.size());
  m.units.push_back({0, m.params.total()});
  for (int64_t l = 0; l < n; ++l) {
    const std::string prefix = fmt::format("blocks.{}.", m.first_block + l);
    const int64_t begin = m.params.total();
    for (const Part& p : m.spec.block.parts) {
      if (experts_last && p.role == Role::kExpert) continue;
      m.blocks[l][p.id] = b.add(p, prefix);
    }
    m.units.push_back({begin, m.params.total()});
  }
  m.experts_begin = m.params.total();
  if (experts_last && c.is_moe()) {
    for (int64_t l = 0; l < n; ++l) {
      const std::string prefix = fmt::format("blocks.{}.", m.first_block + l);
      const int64_t begin = m.params.total();
      for (const Part& p : m.spec.block.parts) {
        if (p.role == Role::kExpert) m.blocks[l][p.id] = b.add(p, prefix);
      }
      m.units.push_back({begin, m.params.total()});
    }
  }
  m.adapters_begin = m.params.total();
  m.first_adapter_unit = int64_t(m.units.size());
  if (!m.spec.block.adapters.empty()) m.adapters.resize(n);
  // The dense parts' adapters, a unit per block, then the expert stacks' (split over ep like
  // them), a unit per block: each its own trained group.
  for (const bool experts : {false, true}) {
    if (experts) {
      m.expert_adapters_begin = m.params.total();
      m.first_expert_adapter_unit = int64_t(m.units.size());
    }
    const auto of_kind = [&](const Part& p) { return (p.role == Role::kExpert) == experts; };
    if (std::none_of(m.spec.block.adapters.begin(), m.spec.block.adapters.end(), of_kind)) continue;
    for (int64_t l = 0; l < n; ++l) {
      const std::string prefix = fmt::format("blocks.{}.", m.first_block + l);
      const int64_t begin = m.params.total();
      for (const Part& p : m.spec.block.adapters) {
        if (!of_kind(p)) continue;
        AdapterOffsets& o = m.adapters[l][p.id];
        (p.lora == LoraMatrix::kA ? o.a : o.b) = b.add(p, prefix).weight;
      }
      m.units.push_back({begin, m.params.total()});
    }
  }
  return m;
}

}  // namespace

std::array<int64_t, 4> ModelLayout::block_units(int64_t layer) const {
  const bool dense_adapters = adapters_begin < expert_adapters_begin;
  const bool expert_adapters = expert_adapters_begin < params.total();
  return {1 + layer, has_experts() ? expert_unit(layer) : -1,
          dense_adapters ? first_adapter_unit + layer : -1,
          expert_adapters ? first_expert_adapter_unit + layer : -1};
}

int64_t ModelLayout::head_weight() const {
  return spec.tied_head ? outer[PartId::kTokenEmbedding].weight : outer[PartId::kHead].weight;
}

std::vector<int64_t> linear_weight_offsets(const ModelLayout& layout) {
  std::vector<int64_t> offsets;
  if (layout.has_head) offsets.push_back(layout.head_weight());
  for (const PartTable& b : layout.blocks) {
    for (PartId id : kDenseLinearParts) {
      if (b[id].weight >= 0) offsets.push_back(b[id].weight);
    }
  }
  return offsets;
}

std::vector<std::pair<int64_t, int64_t>> f32_read_ranges(const ModelLayout& layout, int64_t begin,
                                                         int64_t end) {
  std::vector<int64_t> low_only = linear_weight_offsets(layout);
  if (layout.has_embedding) std::erase(low_only, layout.outer[PartId::kTokenEmbedding].weight);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const ParamInfo& p : layout.params.entries()) {
    const int64_t b = std::max(p.offset, begin), e = std::min(p.offset + p.shape.numel(), end);
    if (b >= e || std::find(low_only.begin(), low_only.end(), p.offset) != low_only.end()) continue;
    if (!ranges.empty() && ranges.back().second == b) {
      ranges.back().second = e;
    } else {
      ranges.emplace_back(b, e);
    }
  }
  return ranges;
}

ModelLayout model_layout(const ModelConfig& c, const Sharding& sharding) {
  validate(c);
  check(sharding.tp_rank >= 0 && sharding.tp_rank < sharding.tp && sharding.ep_rank >= 0 &&
            sharding.ep_rank < sharding.ep,
        "rank {} of tp {} / rank {} of ep {} is outside the mesh", sharding.tp_rank, sharding.tp,
        sharding.ep_rank, sharding.ep);
  const int64_t end = sharding.block_end < 0 ? c.n_layer : sharding.block_end;
  check(sharding.block_begin >= 0 && sharding.block_begin < end && end <= c.n_layer,
        "a pipeline stage of blocks [{}, {}) is not a range of the model's {} blocks",
        sharding.block_begin, end, c.n_layer);
  const bool staged = sharding.block_begin > 0 || end < c.n_layer;
  const bool sharded = sharding.tp > 1 || sharding.ep > 1 || staged;
  if (!sharded && !c.is_moe()) return build(c, sharding, {});
  check_sharding(c, sharding.tp, sharding.ep);
  // Every sharded layout, and any layout of a mixture of experts (whose expert stacks move to the
  // end), places its parameters in the canonical layout by name.
  const ModelLayout canonical_layout = build(c, {}, {});
  std::map<std::string, std::pair<int64_t, int64_t>> canonical;
  const auto& entries = canonical_layout.params.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    canonical[entries[i].name] = {entries[i].offset, int64_t(i)};
  }
  return build(c, sharding, canonical);
}

std::vector<int64_t> local_piece_rows(const Part& b, const ParamInfo& info) {
  if (b.external.size() == 1) return {info.shape[0]};
  if (info.placement.rows.size() == 1) return lora_piece_rows(b);
  std::vector<int64_t> widths;
  for (const Placement::Rows& r : info.placement.rows) widths.push_back(r.count);
  return widths;
}

ModelLayout canonical_model_layout(const ModelConfig& c) {
  validate(c);
  return build(c, {}, {});
}

ParameterCount count_parameters(const ModelConfig& c) {
  const ModelSpec spec = model_spec(c);
  ParameterCount n;
  auto count = [&](const Part& p) {
    const int64_t size = p.kind == PartKind::kNorm ? p.in : p.stack * p.out * p.in;
    const int64_t bias = p.bias ? (p.kind == PartKind::kNorm ? p.in : p.out) : 0;
    n.total += size + bias;
    n.active += int64_t(double(size) * (p.role == Role::kExpert ? p.token_share : 1.0)) + bias;
  };
  for (const Part& p : spec.embedding) count(p);
  for (const Part& p : spec.head) count(p);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (const Part& p : spec.block.parts) count(p);
  }
  return n;
}

}  // namespace tessera::model
