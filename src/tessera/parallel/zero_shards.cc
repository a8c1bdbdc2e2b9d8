#include "tessera/parallel/zero_shards.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/kernels/ops.h"

namespace tessera::parallel {

namespace {

namespace k = kernels;

// Shard boundaries stay 64-byte aligned.
constexpr int64_t kShardAlign = 16;

DType dtype_of(kernels::LowPrecision p) {
  return p == kernels::LowPrecision::kF16 ? DType::f16 : DType::bf16;
}

}  // namespace

ZeroShards::ZeroShards(const kernels::Context& ctx, const model::ModelLayout& layout,
                       int64_t first_unit, int64_t end_unit, int stage, model::Precision precision,
                       comm::Communicator& group, int64_t bucket_bytes)
    : ctx_(ctx),
      layout_(layout),
      first_unit_(first_unit),
      end_unit_(end_unit),
      stage_(stage),
      group_(group),
      low_grads_(precision == model::Precision::kBf16),
      begin_(layout.units.at(first_unit).begin),
      end_(layout.units.at(end_unit - 1).end),
      chunk_(ctx, kChunk),
      counts_(group.size()) {
  check(stage >= 0 && stage <= 3, "train.zero must be 0, 1, 2 or 3, got {}", stage);
  if (precision != model::Precision::kF32) low_ = model::low_precision_of(precision);
  const int N = group.size();
  const int64_t total = end_ - begin_;
  shard_bounds_ = bounds(begin_, end_, N);
  lo_ = shard_bounds_[group.rank()];
  hi_ = shard_bounds_[group.rank() + 1];
  owned_begin_ = stage >= 1 ? lo_ : begin_;
  owned_end_ = stage >= 1 ? hi_ : end_;

  const bool shard_params = stage_ >= 3, shard_grads = stage_ >= 2;
  params_base_ = shard_params ? lo_ : begin_;
  grads_base_ = shard_grads ? lo_ : begin_;
  const int64_t n_params = shard_params ? hi_ - lo_ : total;
  const int64_t n_grads = shard_grads ? hi_ - lo_ : total;
  using kernels::DeviceArray;
  if (low_) {
    params_low_ = DeviceArray<uint16_t>(ctx, n_params);
    master_ = DeviceArray<float>(ctx, owned_end_ - owned_begin_);
  } else {
    params_f32_ = DeviceArray<float>(ctx, n_params);
  }
  if (low_grads_) {
    grads_low_ = DeviceArray<uint16_t>(ctx, n_grads);
  } else {
    grads_f32_ = DeviceArray<float>(ctx, n_grads);
  }

  int64_t other_unit = 0, reduced = 0;
  for (int64_t u = first_unit_; u < end_unit_; ++u) {
    const model::ParameterUnit& x = layout_.units[u];
    if (u != 0) other_unit = std::max(other_unit, x.size());
    reduced =
        std::max(reduced, std::max<int64_t>(0, std::min(x.end, hi_) - std::max(x.begin, lo_)));
  }
  const int64_t slot_size[2] = {first_unit_ == 0 ? layout_.units[0].size() : 0, other_unit};
  for (int s = 0; s < 2; ++s) {
    if (low_ || shard_params) slots_[s].f32 = DeviceArray<float>(ctx, slot_size[s]);
    // In low precision only what is read in f32 is widened; a read of anything else finds NaN.
    if (low_ && !ctx.on_cuda()) {
      std::fill_n(slots_[s].f32.data(), slot_size[s], std::numeric_limits<float>::quiet_NaN());
    }
    if (low_ && shard_params) slots_[s].low = DeviceArray<uint16_t>(ctx, slot_size[s]);
    if (!direct_gradients()) slots_[s].grads = DeviceArray<float>(ctx, slot_size[s]);
  }
  if (shard_grads) reduced_ = DeviceArray<float>(ctx, reduced);
  fresh_.assign(size_t(end_unit_ - first_unit_), true);  // the gradients start at zero
  if (low_) {
    for (int64_t u = first_unit_; u < end_unit_; ++u) {
      const model::ParameterUnit& x = layout_.units[u];
      widened_.push_back(model::f32_read_ranges(layout_, x.begin, x.end));
    }
  }
  if (!shard_grads && N > 1) {
    void* grads = low_grads_ ? static_cast<void*>(grads_low_.data()) : grads_f32_.data();
    const DType dtype = low_grads_ ? DType::bf16 : DType::f32;
    const int64_t bucket = std::max<int64_t>(1, bucket_bytes / int64_t(dtype_size(dtype)));
    sync_.emplace(group_, grads, dtype, total, bucket);
  }
}

std::vector<int64_t> ZeroShards::bounds(int64_t begin, int64_t end, int ranks) {
  const int64_t total = end - begin;
  const int64_t per_rank =
      ((total + ranks - 1) / ranks + kShardAlign - 1) / kShardAlign * kShardAlign;
  std::vector<int64_t> b;
  for (int r = 0; r <= ranks; ++r) b.push_back(begin + std::min(total, r * per_rank));
  return b;
}

const model::ParameterUnit& ZeroShards::unit(int64_t u) const {
  check(u >= first_unit_ && u < end_unit_, "unit {} is not one of this store's units [{}, {})", u,
        first_unit_, end_unit_);
  return layout_.units[u];
}

std::span<const int64_t> ZeroShards::shard_counts(int64_t begin, int64_t end) {
  for (size_t r = 0; r < counts_.size(); ++r) {
    counts_[r] = std::max<int64_t>(
        0, std::min(end, shard_bounds_[r + 1]) - std::max(begin, shard_bounds_[r]));
  }
  return counts_;
}

void* ZeroShards::param_storage(int64_t flat) {
  if (low_) return params_low_.data() + (flat - params_base_);
  return params_f32_.data() + (flat - params_base_);
}

float* ZeroShards::master(int64_t flat) {
  if (low_) return master_.data() + (flat - owned_begin_);
  return params_f32_.data() + (flat - params_base_);
}

void ZeroShards::zero_grad() {
  k::fill_zeros(ctx_, grads_f32_.data(), sizeof(float) * size_t(grads_f32_.size()));
  k::fill_zeros(ctx_, grads_low_.data(), sizeof(uint16_t) * size_t(grads_low_.size()));
  fresh_.assign(size_t(end_unit_ - first_unit_), true);
}

model::ParameterStore::Weights ZeroShards::acquire(int64_t u) {
  const model::ParameterUnit& x = unit(u);
  Slot& s = slot(u);
  if (stage_ >= 3) {
    const std::span<const int64_t> counts = shard_counts(x.begin, x.end);
    const int64_t first = std::clamp(x.begin, lo_, hi_);
    void* recv = low_ ? static_cast<void*>(s.low.data()) : s.f32.data();
    group_.all_gather(param_storage(first), recv, counts, low_ ? dtype_of(*low_) : DType::f32);
    if (!low_) return {s.f32.data(), nullptr};
    widen(u, s.low.data(), s.f32.data());
    return {s.f32.data(), s.low.data()};
  }
  if (!low_) return {params_f32_.data() + (x.begin - params_base_), nullptr};
  const uint16_t* low = params_low_.data() + (x.begin - params_base_);
  widen(u, low, s.f32.data());
  return {s.f32.data(), low};
}

void ZeroShards::widen(int64_t u, const uint16_t* low, float* f32) {
  const int64_t begin = unit(u).begin;
  for (const auto& [b, e] : widened_[u - first_unit_]) {
    k::cast_from_low(ctx_, low + (b - begin), f32 + (b - begin), e - b, *low_);
  }
}

float* ZeroShards::gradients(int64_t u) {
  const model::ParameterUnit& x = unit(u);
  if (direct_gradients()) return grads_f32_.data() + (x.begin - grads_base_);
  float* g = slot(u).grads.data();
  k::fill_zeros(ctx_, g, sizeof(float) * size_t(x.size()));
  return g;
}

void ZeroShards::accumulate_gradients(int64_t u, int64_t flat, const float* g, int64_t n) {
  if (!low_grads_) {
    float* dst = grads_f32_.data() + (flat - grads_base_);
    k::add(ctx_, dst, g, dst, n);
    return;
  }
  // The unit's first gradients since they were zeroed are its sums: narrowing them is enough.
  const bool fresh = std::exchange(fresh_[size_t(u - first_unit_)], false);
  if (fresh) {
    k::cast_to_low(ctx_, g, grads_low_.data() + (flat - grads_base_), n, k::LowPrecision::kBf16);
    return;
  }
  for (int64_t done = 0; done < n; done += kChunk) {
    const int64_t m = std::min(kChunk, n - done);
    uint16_t* dst = grads_low_.data() + (flat + done - grads_base_);
    k::cast_from_low(ctx_, dst, chunk_.data(), m, k::LowPrecision::kBf16);
    k::add(ctx_, chunk_.data(), g + done, chunk_.data(), m);
    k::cast_to_low(ctx_, chunk_.data(), dst, m, k::LowPrecision::kBf16);
  }
}

void ZeroShards::gradients_done(int64_t u) {
  const model::ParameterUnit& x = unit(u);
  Slot& s = slot(u);
  if (stage_ >= 2) {
    const std::span<const int64_t> counts = shard_counts(x.begin, x.end);
    group_.reduce_scatter(s.grads.data(), reduced_.data(), counts, DType::f32);
    accumulate_gradients(u, std::clamp(x.begin, lo_, hi_), reduced_.data(), counts[group_.rank()]);
    return;
  }
  if (!direct_gradients()) accumulate_gradients(u, x.begin, s.grads.data(), x.size());
  if (sync_ && last_micro_step_) sync_->ready_from(x.begin - begin_);
}

double ZeroShards::reduce_gradients() { return sync_ ? sync_->finish() : 0.0; }

void ZeroShards::all_reduce_gradients(int64_t flat, int64_t n, comm::Communicator& group) {
  check(stage_ < 2 && flat >= begin_ && flat + n <= end_,
        "gradients [{}, {}) are not all kept here (ZeRO stage {}, range [{}, {}))", flat, flat + n,
        stage_, begin_, end_);
  if (low_grads_) {
    group.all_reduce(grads_low_.data() + (flat - grads_base_), n, DType::bf16);
  } else {
    group.all_reduce(grads_f32_.data() + (flat - grads_base_), n, DType::f32);
  }
}

const float* ZeroShards::gradient_chunk(int64_t flat, int64_t n) {
  if (!low_grads_) return grads_f32_.data() + (flat - grads_base_);
  k::cast_from_low(ctx_, grads_low_.data() + (flat - grads_base_), chunk_.data(), n,
                   k::LowPrecision::kBf16);
  return chunk_.data();
}

void ZeroShards::publish() {
  const int64_t b = owned_begin_, n = owned_end_ - b;
  if (low_)
    k::cast_to_low(ctx_, master_.data(), static_cast<uint16_t*>(param_storage(b)), n, *low_);
  share();
}

ZeroShards::LowUpdate ZeroShards::low_update(int64_t flat) {
  check(low_.has_value(), "low_update: the parameters are kept in f32");
  const int64_t g = flat - grads_base_;
  return {low_grads_ ? nullptr : grads_f32_.data() + g,
          low_grads_ ? grads_low_.data() + g : nullptr,
          static_cast<uint16_t*>(param_storage(flat))};
}

void ZeroShards::share() {
  const int64_t b = owned_begin_;
  if ((stage_ == 1 || stage_ == 2) && group_.size() > 1) {
    for (int r = 0; r < group_.size(); ++r) counts_[r] = shard_bounds_[r + 1] - shard_bounds_[r];
    group_.all_gather(param_storage(b), param_storage(begin_), counts_,
                      low_ ? dtype_of(*low_) : DType::f32);
  }
}

ShardBytes ZeroShards::memory() const {
  auto bytes = [](const auto& v) { return v.size() * int64_t(sizeof(*v.data())); };
  ShardBytes r;
  r.params = bytes(params_f32_) + bytes(params_low_);
  r.grads = bytes(grads_f32_) + bytes(grads_low_);
  r.master = bytes(master_);
  r.working = bytes(reduced_) + bytes(chunk_);
  for (const Slot& s : slots_) r.working += bytes(s.f32) + bytes(s.grads) + bytes(s.low);
  return r;
}

}  // namespace tessera::parallel
