#include "tessera/train/zero_state.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"
#include "tessera/train/state_checkpoint.h"

namespace tessera::train {

namespace {

namespace k = kernels;

// Optimizer, norm and finiteness passes walk the gradients in pieces of this many elements, so
// low-precision gradients widen into a small buffer.
constexpr int64_t kChunk = int64_t{1} << 18;
// Shard boundaries stay 64-byte aligned.
constexpr int64_t kShardAlign = 16;

std::vector<int64_t> shard_bounds(int64_t total, int ranks) {
  const int64_t per_rank =
      ((total + ranks - 1) / ranks + kShardAlign - 1) / kShardAlign * kShardAlign;
  std::vector<int64_t> bounds;
  for (int r = 0; r <= ranks; ++r) bounds.push_back(std::min(total, r * per_rank));
  return bounds;
}

// All-gather moves bytes only; f16 travels under the bf16 tag, which has its element size.
constexpr DType kLowCarrier = DType::bf16;

}  // namespace

ZeroState::ZeroState(const model::ModelConfig& config, const TrainConfig& train, int stage,
                     dist::Communicator& dp, int64_t bucket_bytes)
    : config_(config),
      layout_(model::model_layout(config)),
      units_(layout_.units),
      stage_(stage),
      dp_(dp),
      low_grads_(train.precision == model::Precision::kBf16),
      total_(layout_.params.total()),
      shard_bounds_(shard_bounds(total_, dp.size())),
      lo_(shard_bounds_[dp.rank()]),
      hi_(shard_bounds_[dp.rank() + 1]),
      adam_(layout_.params, train, stage >= 1 ? lo_ : 0, stage >= 1 ? hi_ : total_),
      chunk_(kChunk),
      counts_(dp.size()) {
  check(stage >= 0 && stage <= 3, "train.zero must be 0, 1, 2 or 3, got {}", stage);
  if (train.precision != model::Precision::kF32) low_ = model::low_precision_of(train.precision);
  const int N = dp.size();

  const bool shard_params = stage_ >= 3, shard_grads = stage_ >= 2;
  params_base_ = shard_params ? lo_ : 0;
  grads_base_ = shard_grads ? lo_ : 0;
  const int64_t n_params = shard_params ? hi_ - lo_ : total_;
  const int64_t n_grads = shard_grads ? hi_ - lo_ : total_;
  if (low_) {
    params_low_.resize(n_params);
    master_.resize(adam_.end() - adam_.begin());
  } else {
    params_f32_.resize(n_params);
  }
  if (low_grads_) {
    grads_low_.resize(n_grads);
  } else {
    grads_f32_.resize(n_grads);
  }

  int64_t block_unit = 0, reduced = 0;
  for (size_t u = 1; u < units_.size(); ++u) block_unit = std::max(block_unit, units_[u].size());
  for (const model::ParameterUnit& u : units_) {
    reduced =
        std::max(reduced, std::max<int64_t>(0, std::min(u.end, hi_) - std::max(u.begin, lo_)));
  }
  const int64_t slot_size[2] = {units_[0].size(), block_unit};
  for (int s = 0; s < 2; ++s) {
    if (low_ || shard_params) slots_[s].f32.resize(slot_size[s]);
    if (low_ && shard_params) slots_[s].low.resize(slot_size[s]);
    if (!direct_gradients()) slots_[s].grads.resize(slot_size[s]);
  }
  if (shard_grads) reduced_.resize(reduced);
  if (!shard_grads && N > 1) {
    void* grads = low_grads_ ? static_cast<void*>(grads_low_.data()) : grads_f32_.data();
    const DType dtype = low_grads_ ? DType::bf16 : DType::f32;
    const int64_t bucket = std::max<int64_t>(1, bucket_bytes / int64_t(dtype_size(dtype)));
    sync_.emplace(dp_, grads, dtype, total_, bucket);
  }
}

std::span<const int64_t> ZeroState::shard_counts(int64_t begin, int64_t end) {
  for (size_t r = 0; r < counts_.size(); ++r) {
    counts_[r] = std::max<int64_t>(
        0, std::min(end, shard_bounds_[r + 1]) - std::max(begin, shard_bounds_[r]));
  }
  return counts_;
}

void* ZeroState::param_storage(int64_t flat) {
  if (low_) return params_low_.data() + (flat - params_base_);
  return params_f32_.data() + (flat - params_base_);
}

float* ZeroState::master(int64_t flat) {
  if (low_) return master_.data() + (flat - adam_.begin());
  return params_f32_.data() + (flat - params_base_);
}

void ZeroState::init(uint64_t seed) {
  model::initial_parameters(layout_, seed, adam_.begin(), adam_.end(),
                            master(adam_.begin()));
  publish_parameters();
}

void ZeroState::load(const std::filesystem::path& step_dir, bool with_optimizer) {
  const int64_t b = adam_.begin(), e = adam_.end();
  read_state_range(step_dir, layout_.params, StatePart::kParams, b, e, master(b));
  if (with_optimizer) {
    read_state_range(step_dir, layout_.params, StatePart::kAdamM, b, e, adam_.m().data());
    read_state_range(step_dir, layout_.params, StatePart::kAdamV, b, e, adam_.v().data());
  }
  publish_parameters();
}

std::vector<NamedTensor> ZeroState::checkpoint_tensors() {
  if (stage_ == 0) {
    std::vector<NamedTensor> out = model::named_views(layout_.params, master(0));
    for (StatePart part : {StatePart::kAdamM, StatePart::kAdamV}) {
      float* data = part == StatePart::kAdamM ? adam_.m().data() : adam_.v().data();
      for (NamedTensor& t : model::named_views(layout_.params, data, state_part_prefix(part))) {
        out.push_back(std::move(t));
      }
    }
    return out;
  }
  const Shape shape{adam_.end() - adam_.begin()};
  const int rank = dp_.rank();
  return {
      {shard_tensor_name(StatePart::kParams, rank),
       Tensor{master(adam_.begin()), shape, DType::f32}},
      {shard_tensor_name(StatePart::kAdamM, rank), Tensor{adam_.m().data(), shape, DType::f32}},
      {shard_tensor_name(StatePart::kAdamV, rank), Tensor{adam_.v().data(), shape, DType::f32}}};
}

nlohmann::json ZeroState::checkpoint_layout() const {
  if (stage_ == 0) return nullptr;
  nlohmann::json shards = nlohmann::json::array();
  for (size_t r = 0; r + 1 < shard_bounds_.size(); ++r) {
    shards.push_back({shard_bounds_[r], shard_bounds_[r + 1]});
  }
  return {{"stage", stage_}, {"ranks", dp_.size()}, {"parameters", total_}, {"shards", shards}};
}

void ZeroState::zero_grad() {
  std::fill(grads_f32_.begin(), grads_f32_.end(), 0.0f);
  std::fill(grads_low_.begin(), grads_low_.end(), uint16_t{0});
}

model::ParameterStore::Weights ZeroState::acquire(int64_t unit) {
  const model::ParameterUnit& u = units_[unit];
  Slot& s = slot(unit);
  if (stage_ >= 3) {
    const std::span<const int64_t> counts = shard_counts(u.begin, u.end);
    const int64_t first = std::clamp(u.begin, lo_, hi_);
    void* recv = low_ ? static_cast<void*>(s.low.data()) : s.f32.data();
    dp_.all_gather(param_storage(first), recv, counts, low_ ? kLowCarrier : DType::f32);
    if (!low_) return {s.f32.data(), nullptr};
    k::cast_from_low(s.low.data(), s.f32.data(), u.size(), *low_);
    return {s.f32.data(), s.low.data()};
  }
  if (!low_) return {params_f32_.data() + u.begin, nullptr};
  const uint16_t* low = params_low_.data() + u.begin;
  k::cast_from_low(low, s.f32.data(), u.size(), *low_);
  return {s.f32.data(), low};
}

float* ZeroState::gradients(int64_t unit) {
  const model::ParameterUnit& u = units_[unit];
  if (direct_gradients()) return grads_f32_.data() + u.begin;
  std::vector<float>& g = slot(unit).grads;
  std::fill(g.begin(), g.begin() + u.size(), 0.0f);
  return g.data();
}

void ZeroState::accumulate_gradients(int64_t flat, const float* g, int64_t n) {
  if (!low_grads_) {
    float* dst = grads_f32_.data() + (flat - grads_base_);
    k::add(dst, g, dst, n);
    return;
  }
  for (int64_t done = 0; done < n; done += kChunk) {
    const int64_t m = std::min(kChunk, n - done);
    uint16_t* dst = grads_low_.data() + (flat + done - grads_base_);
    k::cast_from_low(dst, chunk_.data(), m, k::LowPrecision::kBf16);
    k::add(chunk_.data(), g + done, chunk_.data(), m);
    k::cast_to_low(chunk_.data(), dst, m, k::LowPrecision::kBf16);
  }
}

void ZeroState::gradients_done(int64_t unit) {
  const model::ParameterUnit& u = units_[unit];
  Slot& s = slot(unit);
  if (stage_ >= 2) {
    const std::span<const int64_t> counts = shard_counts(u.begin, u.end);
    dp_.reduce_scatter(s.grads.data(), reduced_.data(), counts, DType::f32);
    accumulate_gradients(std::clamp(u.begin, lo_, hi_), reduced_.data(), counts[dp_.rank()]);
    return;
  }
  if (!direct_gradients()) accumulate_gradients(u.begin, s.grads.data(), u.size());
  if (sync_ && last_micro_step_) sync_->ready_from(u.begin);
}

double ZeroState::reduce_gradients() { return sync_ ? sync_->finish() : 0.0; }

const float* ZeroState::gradient_chunk(int64_t flat, int64_t n) {
  if (!low_grads_) return grads_f32_.data() + (flat - grads_base_);
  k::cast_from_low(grads_low_.data() + (flat - grads_base_), chunk_.data(), n,
                   k::LowPrecision::kBf16);
  return chunk_.data();
}

bool ZeroState::gradients_finite() {
  double bad = 0;
  for (int64_t b = adam_.begin(); b < adam_.end() && bad == 0; b += kChunk) {
    const int64_t n = std::min(kChunk, adam_.end() - b);
    if (!k::all_finite(gradient_chunk(b, n), n)) bad = 1;
  }
  if (stage_ >= 1) dp_.all_reduce(&bad, 1);
  return bad == 0;
}

double ZeroState::gradient_norm() {
  double sum = 0;
  for (int64_t b = adam_.begin(); b < adam_.end(); b += kChunk) {
    const int64_t n = std::min(kChunk, adam_.end() - b);
    sum += k::sum_squares<float>(gradient_chunk(b, n), n);
  }
  if (stage_ >= 1) dp_.all_reduce(&sum, 1);
  return std::sqrt(sum);
}

void ZeroState::update(double lr, float grad_multiplier) {
  adam_.begin_step();
  for (int64_t b = adam_.begin(); b < adam_.end(); b += kChunk) {
    const int64_t n = std::min(kChunk, adam_.end() - b);
    const float* g = gradient_chunk(b, n);
    if (grad_multiplier != 1.0f) {
      if (g != chunk_.data()) std::memcpy(chunk_.data(), g, sizeof(float) * n);
      k::scale(chunk_.data(), grad_multiplier, n);
      g = chunk_.data();
    }
    adam_.update(b, n, master(b), g, lr);
  }
  publish_parameters();
}

void ZeroState::publish_parameters() {
  const int64_t b = adam_.begin(), n = adam_.end() - b;
  if (low_) k::cast_to_low(master_.data(), static_cast<uint16_t*>(param_storage(b)), n, *low_);
  if ((stage_ == 1 || stage_ == 2) && dp_.size() > 1) {
    for (int r = 0; r < dp_.size(); ++r) counts_[r] = shard_bounds_[r + 1] - shard_bounds_[r];
    dp_.all_gather(param_storage(b), param_storage(0), counts_, low_ ? kLowCarrier : DType::f32);
  }
}

MemoryReport ZeroState::memory() const {
  auto bytes = [](const auto& v) { return int64_t(v.size() * sizeof(v[0])); };
  MemoryReport r;
  r.params = bytes(params_f32_) + bytes(params_low_);
  r.grads = bytes(grads_f32_) + bytes(grads_low_);
  r.optimizer = bytes(master_) + 8 * (adam_.end() - adam_.begin());
  r.working = bytes(reduced_) + bytes(chunk_);
  for (const Slot& s : slots_) r.working += bytes(s.f32) + bytes(s.grads) + bytes(s.low);
  return r;
}

}  // namespace tessera::train
