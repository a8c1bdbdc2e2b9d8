#include "tessera/train/train_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tessera/ckpt/state_reader.h"
#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::train {

namespace k = kernels;
using dist::ZeroShards;

TrainState::TrainState(const model::ModelConfig& config, const TrainConfig& train,
                       const dist::Mesh& mesh, const model::Sharding& sharding,
                       int64_t bucket_bytes)
    : config_(config),
      mesh_(mesh),
      stage_(int(train.zero)),
      layout_(model::model_layout(config, sharding)),
      scaled_(ZeroShards::kChunk) {
  const int64_t L = config.n_layer;
  const dist::MeshShape& shape = mesh.shape();
  auto add = [&](std::string name, int64_t first, int64_t end, dist::Communicator& group,
                 dist::Communicator* across, int group_rank) {
    Group g;
    g.name = std::move(name);
    g.shards = std::make_unique<ZeroShards>(layout_, first, end, stage_, train.precision, group,
                                            bucket_bytes);
    g.adam = std::make_unique<AdamW>(layout_.params, train, g.shards->owned_begin(),
                                     g.shards->owned_end());
    g.across = across;
    g.writes = stage_ >= 1 || group_rank == 0;
    groups_.push_back(std::move(g));
  };
  add("dense", 0, 1 + L, mesh.dp(), nullptr, mesh.coords().dp);
  if (layout_.has_experts()) {
    add("experts", 1 + L, 1 + 2 * L, mesh.expert_dp(), &mesh.ep(),
        int(mesh.coords().dp / shape.ep));
  }
  for (const model::ParamInfo& p : layout_.params.entries()) {
    int64_t row = 0;
    for (const model::Placement::Rows& r : p.placement.rows) {
      if (r.copies > 1) {
        const int64_t cols = p.placement.cols;
        copies_.push_back({p.offset + row * cols, p.offset + (row + r.count) * cols, r.copies});
      }
      row += r.count;
    }
  }
}

TrainState::Group& TrainState::group_of(int64_t unit) {
  return groups_.size() > 1 && unit > config_.n_layer ? groups_[1] : groups_[0];
}

int64_t TrainState::bucket_count() const { return groups_.front().shards->bucket_count(); }

void TrainState::init(uint64_t seed) {
  for (Group& g : groups_) {
    const int64_t b = g.shards->owned_begin(), e = g.shards->owned_end();
    model::initial_parameters(layout_, seed, b, e, g.shards->master(b));
    g.shards->publish();
  }
}

void TrainState::load(const std::filesystem::path& step_dir, bool with_optimizer) {
  for (Group& g : groups_) {
    const int64_t b = g.shards->owned_begin(), e = g.shards->owned_end();
    const model::ParameterLayout& params = layout_.params;
    ckpt::read_state_range(step_dir, config_, params, ckpt::StatePart::kParams, b, e,
                           g.shards->master(b));
    if (with_optimizer) {
      ckpt::read_state_range(step_dir, config_, params, ckpt::StatePart::kAdamM, b, e,
                             g.adam->m().data());
      ckpt::read_state_range(step_dir, config_, params, ckpt::StatePart::kAdamV, b, e,
                             g.adam->v().data());
    }
    g.shards->publish();
  }
}

// One rank alone, unsharded, saves every tensor by its name, as every tool reads them.
static bool saves_by_name(const dist::MeshShape& shape, int stage) {
  return shape.tp == 1 && shape.ep == 1 && stage == 0;
}

std::vector<NamedTensor> TrainState::checkpoint_tensors() {
  std::vector<NamedTensor> out;
  if (saves_by_name(mesh_.shape(), stage_)) {
    if (mesh_.world().rank() != 0) return out;
    for (ckpt::StatePart part : ckpt::kStateParts) {
      for (const model::ParamInfo& p : layout_.params.entries()) {
        Group& g = group_of(p.offset >= layout_.experts_begin ? config_.n_layer + 1 : 0);
        float* data = part == ckpt::StatePart::kParams ? g.shards->master(p.offset)
                      : part == ckpt::StatePart::kAdamM
                          ? g.adam->m().data() + (p.offset - g.adam->begin())
                          : g.adam->v().data() + (p.offset - g.adam->begin());
        out.push_back({ckpt::state_part_prefix(part) + p.name, Tensor{data, p.shape, DType::f32}});
      }
    }
    return out;
  }
  for (Group& g : groups_) {
    if (!g.writes) continue;
    const int64_t b = g.shards->owned_begin(), n = g.shards->owned_end() - b;
    const std::string piece = fmt::format("rank{}.{}", mesh_.world().rank(), g.name);
    for (ckpt::StatePart part : ckpt::kStateParts) {
      float* data = part == ckpt::StatePart::kParams ? g.shards->master(b)
                    : part == ckpt::StatePart::kAdamM ? g.adam->m().data()
                                                       : g.adam->v().data();
      out.push_back({ckpt::placed_tensor_name(piece, part), Tensor{data, Shape{n}, DType::f32}});
    }
  }
  return out;
}

nlohmann::json TrainState::checkpoint_layout() const {
  const dist::MeshShape& shape = mesh_.shape();
  if (saves_by_name(shape, stage_)) return nullptr;
  // Every rank's slice layout and pieces, as every rank computes them alike.
  std::vector<model::ModelLayout> slices;
  for (int64_t e = 0; e < shape.ep; ++e) {
    for (int64_t t = 0; t < shape.tp; ++t) {
      slices.push_back(model::model_layout(config_, {shape.tp, t, shape.ep, e}));
    }
  }
  std::vector<ckpt::PlacedPiece> pieces;
  const int64_t L = config_.n_layer;
  for (int r = 0; r < mesh_.world().size(); ++r) {
    const dist::MeshCoords c = mesh_.coords_of(r);
    const int64_t ep_rank = c.dp % shape.ep;
    const model::ModelLayout& slice = slices[ep_rank * shape.tp + c.tp];
    const std::string slice_name = ckpt::slice_name(slice.sharding);
    for (const Group& g : groups_) {
      const bool experts = g.name == "experts";
      const int64_t first = experts ? 1 + L : 0, end_unit = experts ? 1 + 2 * L : 1 + L;
      const int64_t begin = slice.units[first].begin, end = slice.units[end_unit - 1].end;
      const int group_rank = int(experts ? c.dp / shape.ep : c.dp);
      const int ranks = int(experts ? shape.dp / shape.ep : shape.dp);
      if (stage_ == 0 && group_rank != 0) continue;
      int64_t lo = begin, hi = end;
      if (stage_ >= 1) {
        const std::vector<int64_t> bounds = ZeroShards::bounds(begin, end, ranks);
        lo = bounds[group_rank];
        hi = bounds[group_rank + 1];
      }
      pieces.push_back({fmt::format("rank{}.{}", r, g.name), slice_name, lo, hi});
    }
  }
  std::vector<const model::ModelLayout*> views;
  for (const model::ModelLayout& s : slices) views.push_back(&s);
  const nlohmann::json mesh = {
      {"dp", shape.dp}, {"tp", shape.tp}, {"ep", shape.ep}, {"zero", stage_}};
  return ckpt::placed_metadata(views, pieces, mesh);
}

void TrainState::begin_micro_step(bool last) {
  for (Group& g : groups_) g.shards->begin_micro_step(last);
}

void TrainState::zero_grad() {
  for (Group& g : groups_) g.shards->zero_grad();
}

double TrainState::reduce_gradients() {
  double waited = 0;
  for (Group& g : groups_) waited += g.shards->reduce_gradients();
  return waited;
}

bool TrainState::gradients_finite() {
  double bad = 0;
  for (Group& g : groups_) {
    for (int64_t b = g.shards->owned_begin(); b < g.shards->owned_end() && bad == 0;
         b += ZeroShards::kChunk) {
      const int64_t n = std::min(ZeroShards::kChunk, g.shards->owned_end() - b);
      if (!k::all_finite(g.shards->gradient_chunk(b, n), n)) bad = 1;
    }
  }
  mesh_.world().all_reduce(&bad, 1);
  return bad == 0;
}

// The sum of squares of the gradients this rank owns, each counted once over the tensor-parallel
// ranks: a value that c of them hold weighs 1 / c.
double TrainState::owned_square_sum(Group& g) {
  double sum = 0;
  const int64_t lo = g.shards->owned_begin(), hi = g.shards->owned_end();
  for (int64_t b = lo; b < hi; b += ZeroShards::kChunk) {
    const int64_t n = std::min(ZeroShards::kChunk, hi - b);
    const float* chunk = g.shards->gradient_chunk(b, n);
    sum += k::sum_squares<float>(chunk, n);
    for (const Copies& c : copies_) {
      const int64_t s = std::max(b, c.begin), e = std::min(b + n, c.end);
      if (s >= e) continue;
      sum -= (1.0 - 1.0 / double(c.copies)) * k::sum_squares<float>(chunk + (s - b), e - s);
    }
  }
  return sum;
}

double TrainState::gradient_norm() {
  double total = 0;
  for (Group& g : groups_) {
    double sum = owned_square_sum(g);
    if (stage_ >= 1) g.shards->group().all_reduce(&sum, 1);
    if (g.across != nullptr) g.across->all_reduce(&sum, 1);
    total += sum;
  }
  mesh_.tp().all_reduce(&total, 1);
  return std::sqrt(total);
}

void TrainState::update(double lr, float grad_multiplier) {
  for (Group& g : groups_) {
    g.adam->begin_step();
    const int64_t lo = g.shards->owned_begin(), hi = g.shards->owned_end();
    for (int64_t b = lo; b < hi; b += ZeroShards::kChunk) {
      const int64_t n = std::min(ZeroShards::kChunk, hi - b);
      const float* grad = g.shards->gradient_chunk(b, n);
      if (grad_multiplier != 1.0f) {
        std::memcpy(scaled_.data(), grad, sizeof(float) * n);
        k::scale(scaled_.data(), grad_multiplier, n);
        grad = scaled_.data();
      }
      g.adam->update(b, n, g.shards->master(b), grad, lr);
    }
    g.shards->publish();
  }
}

void TrainState::set_steps_taken(int64_t n) {
  for (Group& g : groups_) g.adam->set_steps_taken(n);
}

MemoryReport TrainState::memory() const {
  MemoryReport r;
  for (const Group& g : groups_) {
    const dist::ShardBytes b = g.shards->memory();
    r.params += b.params;
    r.grads += b.grads;
    r.optimizer += b.master + 8 * (g.shards->owned_end() - g.shards->owned_begin());
    r.working += b.working;
  }
  return r;
}

}  // namespace tessera::train
