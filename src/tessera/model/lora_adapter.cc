#include "tessera/model/lora_adapter.h"

#include <algorithm>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/rng.h"
#include "tessera/kernels/lora.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::model {

namespace k = kernels;

LoraAdapter::LoraAdapter(const kernels::Context& ctx, AdapterOffsets params, bool row_parallel,
                         int64_t in, int64_t rank, std::vector<int64_t> widths, float scale,
                         Collectives* tp_group, MatmulFormat format, LoraBuffers buffers,
                         LoraDropout dropout, std::optional<SharedHeads> shared)
    : ctx_(ctx),
      params_(params),
      row_parallel_(row_parallel),
      in_(in),
      rank_(rank),
      widths_(std::move(widths)),
      scale_(scale),
      tp_group_(tp_group),
      format_(format),
      buffers_(buffers),
      dropout_(dropout),
      shared_(shared) {
  check(dropout_.p == 0 || !ctx.on_cuda(), "train.lora_dropout runs on the CPU only");
  if (shared_) {
    int64_t rows = 0;
    for (int64_t w : widths_) rows += w;
    b_rows_grad_.resize(size_t(rows * rank_));
    shared_summed_.resize(size_t(shared_->summed_floats(rank_)));
  }
}

void LoraAdapter::apply_dropout(const float* values, float* out, int64_t N, bool accumulate) const {
  const CounterRng rng(*dropout_.key, dropout_.stream);
  const float keep = 1.0f / (1.0f - dropout_.p);
  // Drawn from 24 random bits: dropped when below p.
  const auto threshold = uint64_t(double(dropout_.p) * double(1 << 24));
  const int64_t in = in_, first = dropout_.first_column, columns = dropout_.columns;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < N; ++r) {
    const float* v = values + r * in;
    float* o = out + r * in;
    const uint64_t row = uint64_t(r * columns + first);
    for (int64_t c = 0; c < in; ++c) {
      const float kept = (rng.bits(row + uint64_t(c)) >> 40) < threshold ? 0.0f : v[c] * keep;
      o[c] = accumulate ? o[c] + kept : kept;
    }
  }
}

const float* LoraAdapter::adapter_input(const float* x, const uint16_t* low, int64_t N) const {
  const float* source = x;
  if (low != nullptr) {
    k::cast_from_low(ctx_, low, buffers_.x, N * in_, format_.precision);
    source = buffers_.x;
  }
  if (!drops()) return source;
  apply_dropout(source, buffers_.x, N, /*accumulate=*/false);
  return buffers_.x;
}

void LoraAdapter::forward(const ParamAccess& p, const float* x, float* y, int64_t N) const {
  if (drops()) x = adapter_input(x, nullptr, N);
  k::lora_down(ctx_, x, p.f32(params_.a), buffers_.u, N, in_, cols());
  k::lora_up(ctx_, buffers_.u, p.f32(params_.b), y, N, rank_, std::span<const int64_t>(widths_),
             scale_);
}

void LoraAdapter::backward(const ParamAccess& p, const float* dy, const MatmulInput& input,
                           float* dx, int64_t N) const {
  const uint16_t* low = format_.low ? input.low : nullptr;
  const auto x = [&] {
    return low != nullptr || drops() ? adapter_input(input.f32, low, N) : input.f32;
  };
  const float* a = p.f32(params_.a);
  float *u = buffers_.u, *du = buffers_.du;
  const int64_t n = N * cols();
  // dx += du A, through the dropout's mask when there is one (buffers_.x holds du A then).
  const auto input_gradient = [&] {
    if (dx == nullptr) return;
    if (!drops()) {
      k::lora_down_backward<float>(ctx_, du, nullptr, a, nullptr, dx, N, in_, cols());
      return;
    }
    k::gemm<float>(ctx_, false, false, N, in_, cols(), 1.0f, du, cols(), a, in_, 0.0f, buffers_.x,
                   in_);
    apply_dropout(buffers_.x, dx, N, /*accumulate=*/true);
  };
  const float* adapted = x();
  k::lora_down(ctx_, adapted, a, u, N, in_, cols());
  if (row_parallel_) tp_group_->all_reduce(u, n);
  float* db = p.grad(params_.b);
  if (shared_) {
    std::fill(b_rows_grad_.begin(), b_rows_grad_.end(), 0.0f);
    db = b_rows_grad_.data();
  }
  k::lora_up_backward(ctx_, dy, u, p.f32(params_.b), du, db, N, rank_,
                      std::span<const int64_t>(widths_), scale_);
  if (shared_) {
    add_shared_gradient(ctx_, *tp_group_, *shared_, db, shared_summed_.data(), p.grad(params_.b),
                        int64_t(b_rows_grad_.size()) / rank_, rank_);
  }
  if (row_parallel_) {
    k::lora_down_backward<float>(ctx_, du, adapted, a, p.grad(params_.a), nullptr, N, in_, cols());
    input_gradient();
    return;
  }
  input_gradient();
  tp_group_->all_reduce(du, n);
  if (drops()) adapted = x();  // the input gradient used buffers_.x
  k::lora_down_backward<float>(ctx_, du, adapted, a, p.grad(params_.a), nullptr, N, in_, cols());
}

namespace {

// The rows of a fused adapter's B that this rank shares with others (qkv's key and value heads,
// each one head on tp / kv_heads ranks), or none.
std::optional<SharedHeads> shared_rows(const Part& b, const Placement& placement) {
  const std::vector<Placement::Rows>& rows = placement.rows;
  if (rows.size() != 3 || rows[1].copies == 1) return std::nullopt;
  const std::vector<int64_t> global = lora_piece_rows(b);  // q, k and v rows of the whole B
  const int64_t head_rows = rows[1].count;
  return SharedHeads{rows[0].count, head_rows, 2, (rows[1].begin - global[0]) / head_rows,
                     global[1] / head_rows};
}

}  // namespace

void BankedAdapter::backward(const ParamAccess&, const float*, const MatmulInput&, float*,
                             int64_t) const {
  fail("adapters served per request are not trained");
}

BlockAdapters::BlockAdapters(const kernels::Context& ctx, const ModelLayout& layout, int64_t layer,
                             Collectives* tp_group, MatmulFormat format, LoraBuffers buffers,
                             const AdapterBank* bank) {
  if (bank != nullptr) {
    for (PartId id : {PartId::kQkv, PartId::kAttentionOut, PartId::kMlpIn, PartId::kMlpOut}) {
      if (layout.spec.block.has(id)) {
        adapters_[int(id)] = std::make_unique<BankedAdapter>(*bank, layout.first_block + layer, id);
      }
    }
    return;
  }
  if (layout.adapters.empty()) return;
  const BlockSpec& spec = layout.spec.block;
  for (const Part& a : spec.adapters) {
    if (a.lora != LoraMatrix::kB || a.role == Role::kExpert) continue;  // experts': MoeLayer's
    const AdapterOffsets& o = layout.adapters[layer][a.id];
    const ParamInfo& b = layout.params.at_offset(o.b);
    const bool row = spec.part(a.id).role == Role::kRow;
    std::vector<int64_t> widths = local_piece_rows(a, b);
    const std::optional<SharedHeads> shared = shared_rows(a, b.placement);
    const int64_t in = layout.params.at_offset(o.a).shape[1];
    const int64_t first_column = row ? int64_t(tp_group->rank()) * in : 0;
    const LoraDropout dropout{float(spec.lora_dropout), buffers.dropout_key,
                              uint64_t((layout.first_block + layer) * kPartIdCount + int(a.id)),
                              first_column, row ? in * tp_group->size() : in};
    adapters_[int(a.id)] = std::make_unique<LoraAdapter>(
        ctx, o, row, in, spec.lora_rank, std::move(widths), float(spec.lora_scale), tp_group,
        format, buffers, dropout, shared);
  }
}

LoraScratch lora_scratch(const BlockSpec& spec) {
  LoraScratch widest;
  for (const Part& a : spec.adapters) {
    if (a.lora != LoraMatrix::kA) continue;
    widest.down = std::max(widest.down, a.out);
    widest.input = std::max(widest.input, a.in);
  }
  return widest;
}

}  // namespace tessera::model
