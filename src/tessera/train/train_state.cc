#include "tessera/train/train_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <tuple>

#include "tessera/ckpt/state_reader.h"
#include "tessera/comm/device_communicator.h"
#include "tessera/core/error.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/device_support.h"
#include "tessera/model/moe_layer.h"
#include "tessera/parallel/rank_memory.h"

namespace tessera::train {

namespace k = kernels;
using parallel::ZeroShards;

namespace {

// The units a group trains, [first, end): the dense ones and the expert stacks, or a LoRA run's
// adapters alone, those of the dense parts and those of the expert stacks (the experts' group).
struct GroupUnits {
  std::string name;
  int64_t first, end;
};
std::vector<GroupUnits> trained_groups(const model::ModelLayout& layout) {
  const int64_t blocks = int64_t(layout.blocks.size());
  if (layout.has_adapters()) {
    const int64_t units = int64_t(layout.units.size()), split = layout.first_expert_adapter_unit;
    std::vector<GroupUnits> groups;
    if (layout.first_adapter_unit < split)
      groups.push_back({"adapters", layout.first_adapter_unit, split});
    if (split < units) groups.push_back({"experts", split, units});
    return groups;
  }
  std::vector<GroupUnits> groups = {{"dense", 0, 1 + blocks}};
  if (layout.has_experts()) groups.push_back({"experts", 1 + blocks, 1 + 2 * blocks});
  return groups;
}

}  // namespace

TrainState::Group& TrainState::Stage::group_of(int64_t unit) {
  for (Group& g : groups) {
    if (unit >= g.first_unit && unit < g.end_unit) return g;
  }
  fail("unit {} belongs to no trained group", unit);
}

TrainState::Group& TrainState::Stage::group_at(int64_t offset) {
  for (Group& g : groups) {
    if (offset >= layout.units[size_t(g.first_unit)].begin &&
        offset < layout.units[size_t(g.end_unit - 1)].end) {
      return g;
    }
  }
  fail("parameter offset {} belongs to no trained group", offset);
}

TrainState::TrainState(const kernels::Context& ctx, const model::ModelConfig& config,
                       const TrainConfig& train, const comm::Mesh& mesh,
                       const model::Sharding& sharding, int64_t bucket_bytes,
                       std::span<const int64_t> boundaries)
    : ctx_(ctx),
      config_(config),
      mesh_(mesh),
      zero_(int(train.zero)),
      scaled_(ctx, ZeroShards::kChunk) {
  const comm::MeshShape& shape = mesh.shape();
  model::check_device_runs(ctx.device.kind,
                           {.tp = shape.tp,
                            .pp = shape.pp,
                            .ep = shape.ep,
                            .cp = shape.cp,
                            .moe = config.is_moe(),
                            .qk_norm = config.qk_norm},
                           fmt::format("train.device = {}", enum_name(ctx.device.kind)));
  device_dp_ = comm::device_communicator(mesh.replicas(), ctx);
  if (boundaries.empty()) {
    boundaries_ = {0, config.n_layer};
  } else {
    boundaries_.assign(boundaries.begin(), boundaries.end());
  }
  const int pp_rank = mesh.coords().pp;
  if (shape.pp > 1 && config.tie_embeddings) {
    tied_ =
        mesh.pp().split(pp_rank == 0 || pp_rank == shape.pp - 1 ? 0 : 1, pp_rank, "tied embedding");
  }
  int k = 0;
  for (const model::Sharding& s : parallel::rank_stages(sharding, boundaries_, shape.pp, pp_rank)) {
    auto stage = std::make_unique<Stage>();
    Stage& st = *stage;
    st.index = pp_rank + k++ * int(shape.pp);
    st.layout = model::model_layout(config, s);
    for (const GroupUnits& units : trained_groups(st.layout)) {
      const bool experts = units.name == "experts";
      Group g;
      g.name = units.name;
      g.first_unit = units.first;
      g.end_unit = units.end;
      comm::Communicator& dp = device_dp_ != nullptr ? *device_dp_ : mesh.replicas();
      g.shards = std::make_unique<ZeroShards>(ctx, st.layout, units.first, units.end, zero_,
                                              train.precision, experts ? mesh.expert_dp() : dp,
                                              bucket_bytes);
      g.adam = std::make_unique<AdamW>(ctx, st.layout.params, train, g.shards->owned_begin(),
                                       g.shards->owned_end());
      g.across = experts ? &mesh.ep() : nullptr;
      g.writes = zero_ >= 1 || (experts ? mesh.coords().dp / shape.ep : mesh.replica_rank()) == 0;
      st.groups.push_back(std::move(g));
    }
    if (st.layout.has_adapters()) {
      st.frozen = std::make_unique<model::FrozenParameters>(ctx, st.layout, train.precision);
    }
    const bool holds_tied = tied_ != nullptr && st.layout.has_embedding != st.layout.has_head;
    for (const model::ParamInfo& p : st.layout.params.entries()) {
      const bool tied = holds_tied && p.name == "wte.weight";
      if (tied) st.tied = p;
      int64_t row = 0;
      for (const model::Placement::Rows& r : p.placement.rows) {
        const int64_t copies = r.copies * (tied ? 2 : 1);
        if (copies > 1) {
          const int64_t cols = p.placement.cols;
          st.copies.push_back({p.offset + row * cols, p.offset + (row + r.count) * cols, copies});
        }
        row += r.count;
      }
    }
    stages_.push_back(std::move(stage));
  }
}

int64_t TrainState::bucket_count() const {
  int64_t n = 0;
  for (const auto& s : stages_) n += s->groups.front().shards->bucket_count();
  return n;
}

void TrainState::init(uint64_t seed) {
  for (auto& s : stages_) {
    for (Group& g : s->groups) {
      const int64_t b = g.shards->owned_begin(), e = g.shards->owned_end();
      std::vector<float>& values = host_values(e - b);
      model::initial_parameters(s->layout, seed, b, e, values.data());
      k::copy_to_device(ctx_, g.shards->master(b), values.data(), sizeof(float) * (e - b));
      g.shards->publish();
    }
    if (s->frozen) {
      s->frozen->assign([&](int64_t begin, int64_t end, float* to) {
        model::initial_parameters(s->layout, seed, begin, end, to);
      });
    }
  }
  if (lora_base_) load_base(*lora_base_);
}

void TrainState::load_base(const std::filesystem::path& step_dir) {
  for (auto& s : stages_) {
    check(s->frozen != nullptr, "load_base: the run trains no adapters");
    s->frozen->assign([&](int64_t begin, int64_t end, float* to) {
      ckpt::read_state_range(step_dir, config_, s->layout.params, ckpt::StatePart::kParams, begin,
                             end, to);
    });
  }
  lora_base_ = std::filesystem::absolute(step_dir);
}

void TrainState::load(const std::filesystem::path& step_dir, bool with_optimizer) {
  for (auto& s : stages_) {
    for (Group& g : s->groups) {
      const int64_t b = g.shards->owned_begin(), e = g.shards->owned_end();
      const model::ParameterLayout& params = s->layout.params;
      std::vector<float>& values = host_values(e - b);
      auto read = [&](ckpt::StatePart part, float* to) {
        ckpt::read_state_range(step_dir, config_, params, part, b, e, values.data());
        k::copy_to_device(ctx_, to, values.data(), sizeof(float) * (e - b));
      };
      read(ckpt::StatePart::kParams, g.shards->master(b));
      if (with_optimizer) {
        read(ckpt::StatePart::kAdamM, g.adam->m().data());
        read(ckpt::StatePart::kAdamV, g.adam->v().data());
      }
      g.shards->publish();
    }
  }
}

// One rank alone, unsharded, saves every tensor by its name, as every tool reads them.
static bool saves_by_name(const comm::MeshShape& shape, int zero) {
  return shape.tp == 1 && shape.ep == 1 && shape.pp == 1 && zero == 0;
}

std::string TrainState::piece_name(int rank, int stage, const std::string& group) const {
  if (boundaries_.size() == 2) return fmt::format("rank{}.{}", rank, group);
  return fmt::format("rank{}.stage{}.{}", rank, stage, group);
}

std::vector<NamedTensor> TrainState::checkpoint_tensors() {
  std::vector<NamedTensor> out = device_checkpoint_tensors();
  if (!ctx_.on_cuda()) return out;
  // The writers read host memory: another device's state is copied into host mirrors, made at the
  // first save and reused.
  host_mirrors_.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    Tensor& t = out[i].tensor;
    std::vector<float>& mirror = host_mirrors_[i];
    mirror.resize(size_t(t.shape.numel()));
    k::copy_to_host(ctx_, mirror.data(), t.data, t.nbytes());
    t.data = mirror.data();
  }
  return out;
}

std::vector<float>& TrainState::host_values(int64_t n) {
  if (int64_t(host_values_.size()) < n) host_values_.resize(size_t(n));
  return host_values_;
}

std::vector<NamedTensor> TrainState::device_checkpoint_tensors() {
  std::vector<NamedTensor> out;
  if (saves_by_name(mesh_.shape(), zero_)) {
    if (mesh_.world().rank() != 0) return out;
    Stage& s = *stages_.front();
    const model::ModelLayout& layout = s.layout;
    for (ckpt::StatePart part : ckpt::kStateParts) {
      for (const model::ParamInfo& p : layout.params.entries()) {
        if (p.offset < layout.adapters_begin && layout.has_adapters()) continue;  // frozen
        Group& g = s.group_at(p.offset);
        float* data = part == ckpt::StatePart::kParams ? g.shards->master(p.offset)
                      : part == ckpt::StatePart::kAdamM
                          ? g.adam->m().data() + (p.offset - g.adam->begin())
                          : g.adam->v().data() + (p.offset - g.adam->begin());
        out.push_back({ckpt::state_part_prefix(part) + p.name, Tensor{data, p.shape, DType::f32}});
      }
    }
    return out;
  }
  for (auto& s : stages_) {
    for (Group& g : s->groups) {
      if (!g.writes) continue;
      const int64_t b = g.shards->owned_begin(), n = g.shards->owned_end() - b;
      const std::string piece = piece_name(mesh_.world().rank(), s->index, g.name);
      for (ckpt::StatePart part : ckpt::kStateParts) {
        float* data = part == ckpt::StatePart::kParams  ? g.shards->master(b)
                      : part == ckpt::StatePart::kAdamM ? g.adam->m().data()
                                                        : g.adam->v().data();
        out.push_back({ckpt::placed_tensor_name(piece, part), Tensor{data, Shape{n}, DType::f32}});
      }
    }
  }
  return out;
}

nlohmann::json TrainState::checkpoint_layout() const {
  const comm::MeshShape& shape = mesh_.shape();
  if (saves_by_name(shape, zero_)) return nullptr;
  // Every rank's stage layouts and pieces, as every rank computes them alike: one layout per
  // stage and tp and ep coordinate.
  std::map<std::tuple<int64_t, int64_t, int64_t>, model::ModelLayout> slices;
  std::vector<ckpt::PlacedPiece> pieces;
  for (int r = 0; r < mesh_.world().size(); ++r) {
    const comm::MeshCoords c = mesh_.coords_of(r);
    const int64_t ep_rank = c.dp % shape.ep;
    const model::Sharding sharding{shape.tp, c.tp, shape.ep, ep_rank};
    int k = 0;
    for (const model::Sharding& s : parallel::rank_stages(sharding, boundaries_, shape.pp, c.pp)) {
      const int stage = c.pp + k++ * int(shape.pp);
      auto [it, added] = slices.try_emplace({stage, c.tp, ep_rank});
      if (added) it->second = model::model_layout(config_, s);
      const model::ModelLayout& slice = it->second;
      for (const GroupUnits& g : trained_groups(slice)) {
        const bool experts = g.name == "experts";
        const int64_t begin = slice.units[g.first].begin, end = slice.units[g.end - 1].end;
        const int group_rank = int(experts ? c.dp / shape.ep : c.dp * shape.cp + c.cp);
        const int ranks = int(experts ? shape.dp / shape.ep : shape.dp * shape.cp);
        if (zero_ == 0 && group_rank != 0) continue;
        int64_t lo = begin, hi = end;
        if (zero_ >= 1) {
          const std::vector<int64_t> bounds = ZeroShards::bounds(begin, end, ranks);
          lo = bounds[group_rank];
          hi = bounds[group_rank + 1];
        }
        pieces.push_back({piece_name(r, stage, g.name), ckpt::slice_name(slice), lo, hi});
      }
    }
  }
  std::vector<const model::ModelLayout*> views;
  for (const auto& [key, s] : slices) views.push_back(&s);
  const nlohmann::json mesh = {{"dp", shape.dp}, {"tp", shape.tp}, {"pp", shape.pp},
                               {"ep", shape.ep}, {"cp", shape.cp}, {"zero", zero_}};
  return ckpt::placed_metadata(views, pieces, mesh);
}

void TrainState::begin_micro_step(bool last) {
  for (auto& s : stages_) {
    for (Group& g : s->groups) g.shards->begin_micro_step(last);
  }
}

void TrainState::zero_grad() {
  for (auto& s : stages_) {
    for (Group& g : s->groups) g.shards->zero_grad();
  }
}

double TrainState::reduce_gradients() {
  double waited = 0;
  for (auto& s : stages_) {
    for (Group& g : s->groups) waited += g.shards->reduce_gradients();
    if (s->tied && !s->frozen) {
      s->groups.front().shards->all_reduce_gradients(s->tied->offset, s->tied->shape.numel(),
                                                     *tied_);
    }
  }
  return waited;
}

bool TrainState::gradients_finite() {
  double bad = 0;
  for (auto& s : stages_) {
    for (Group& g : s->groups) {
      for (int64_t b = g.shards->owned_begin(); b < g.shards->owned_end() && bad == 0;
           b += ZeroShards::kChunk) {
        const int64_t n = std::min(ZeroShards::kChunk, g.shards->owned_end() - b);
        if (!k::all_finite(ctx_, g.shards->gradient_chunk(b, n), n)) bad = 1;
      }
    }
  }
  mesh_.world().all_reduce(&bad, 1);
  return bad == 0;
}

// The sum of squares of the gradients this rank owns, each counted once over the ranks that
// hold it: a value that c of them hold weighs 1 / c.
double TrainState::owned_square_sum(const Stage& s, Group& g) {
  double sum = 0;
  const int64_t lo = g.shards->owned_begin(), hi = g.shards->owned_end();
  for (int64_t b = lo; b < hi; b += ZeroShards::kChunk) {
    const int64_t n = std::min(ZeroShards::kChunk, hi - b);
    const float* chunk = g.shards->gradient_chunk(b, n);
    sum += k::sum_squares<float>(ctx_, chunk, n);
    for (const Copies& c : s.copies) {
      const int64_t from = std::max(b, c.begin), to = std::min(b + n, c.end);
      if (from >= to) continue;
      sum -= (1.0 - 1.0 / double(c.copies)) *
             k::sum_squares<float>(ctx_, chunk + (from - b), to - from);
    }
  }
  return sum;
}

double TrainState::gradient_norm() {
  double total = 0;
  for (auto& s : stages_) {
    for (Group& g : s->groups) {
      double sum = owned_square_sum(*s, g);
      if (zero_ >= 1) g.shards->group().all_reduce(&sum, 1);
      if (g.across != nullptr) g.across->all_reduce(&sum, 1);
      total += sum;
    }
  }
  mesh_.tp().all_reduce(&total, 1);
  mesh_.pp().all_reduce(&total, 1);
  return std::sqrt(total);
}

void TrainState::update(double lr, float grad_multiplier) {
  for (auto& s : stages_) {
    for (Group& g : s->groups) {
      g.adam->begin_step();
      const int64_t lo = g.shards->owned_begin(), hi = g.shards->owned_end();
      if (const std::optional<k::LowPrecision> low = g.shards->low_precision()) {
        const ZeroShards::LowUpdate u = g.shards->low_update(lo);
        g.adam->update_low(lo, hi - lo, g.shards->master(lo), u.grads, u.grads_bf16,
                           grad_multiplier, lr, u.params, *low);
        g.shards->share();
        continue;
      }
      for (int64_t b = lo; b < hi; b += ZeroShards::kChunk) {
        const int64_t n = std::min(ZeroShards::kChunk, hi - b);
        const float* grad = g.shards->gradient_chunk(b, n);
        if (grad_multiplier != 1.0f) {
          k::copy_on_device(ctx_, scaled_.data(), grad, sizeof(float) * n);
          k::scale(ctx_, scaled_.data(), grad_multiplier, n);
          grad = scaled_.data();
        }
        g.adam->update(b, n, g.shards->master(b), grad, lr);
      }
      g.shards->publish();
    }
  }
}

void TrainState::set_steps_taken(int64_t n) {
  for (auto& s : stages_) {
    for (Group& g : s->groups) g.adam->set_steps_taken(n);
  }
}

MemoryReport TrainState::memory() const {
  MemoryReport r;
  for (const auto& s : stages_) {
    for (const Group& g : s->groups) {
      const parallel::ShardBytes b = g.shards->memory();
      r.params += b.params;
      r.grads += b.grads;
      r.optimizer += b.master + 8 * (g.shards->owned_end() - g.shards->owned_begin());
      r.working += b.working;
    }
    if (s->frozen) r.params += s->frozen->bytes();
  }
  return r;
}

}  // namespace tessera::train
