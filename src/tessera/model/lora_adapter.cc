#include "tessera/model/lora_adapter.h"

#include <algorithm>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/kernels/lora.h"
#include "tessera/kernels/low_precision.h"

namespace tessera::model {

namespace k = kernels;

LoraAdapter::LoraAdapter(const kernels::Context& ctx, AdapterOffsets params, bool row_parallel,
                         int64_t in, int64_t rank, std::vector<int64_t> widths, float scale,
                         Collectives* tp_group, MatmulFormat format, float* u, float* du,
                         float* x_scratch)
    : ctx_(ctx),
      params_(params),
      row_parallel_(row_parallel),
      in_(in),
      rank_(rank),
      widths_(std::move(widths)),
      scale_(scale),
      tp_group_(tp_group),
      format_(format),
      u_(u),
      du_(du),
      x_scratch_(x_scratch) {}

void LoraAdapter::forward(const ParamAccess& p, const float* x, float* y, int64_t N) const {
  k::lora_down(ctx_, x, p.f32(params_.a), u_, N, in_, cols());
  k::lora_up(ctx_, u_, p.f32(params_.b), y, N, rank_, std::span<const int64_t>(widths_), scale_);
}

void LoraAdapter::backward(const ParamAccess& p, const float* dy, const MatmulInput& input,
                           float* dx, int64_t N) const {
  const float* x = input.f32;
  if (format_.low && input.low != nullptr) {
    k::cast_from_low(ctx_, input.low, x_scratch_, N * in_, format_.precision);
    x = x_scratch_;
  }
  const float* a = p.f32(params_.a);
  const int64_t n = N * cols();
  k::lora_down(ctx_, x, a, u_, N, in_, cols());
  if (row_parallel_) tp_group_->all_reduce(u_, n);
  k::lora_up_backward(ctx_, dy, u_, p.f32(params_.b), du_, p.grad(params_.b), N, rank_,
                      std::span<const int64_t>(widths_), scale_);
  if (row_parallel_) {
    k::lora_down_backward(ctx_, du_, x, a, p.grad(params_.a), dx, N, in_, cols());
    return;
  }
  k::lora_down_backward<float>(ctx_, du_, x, a, nullptr, dx, N, in_, cols());
  tp_group_->all_reduce(du_, n);
  k::lora_down_backward<float>(ctx_, du_, x, a, p.grad(params_.a), nullptr, N, in_, cols());
}

namespace {

const ParamInfo& param_at(const ParameterLayout& params, int64_t offset) {
  for (const ParamInfo& p : params.entries()) {
    if (p.offset == offset) return p;
  }
  fail("no parameter at offset {}", offset);
}

}  // namespace

void BankedAdapter::backward(const ParamAccess&, const float*, const MatmulInput&, float*,
                             int64_t) const {
  fail("adapters served per request are not trained");
}

BlockAdapters::BlockAdapters(const kernels::Context& ctx, const ModelLayout& layout, int64_t layer,
                             Collectives* tp_group, MatmulFormat format, float* u, float* du,
                             float* x_scratch, const AdapterBank* bank) {
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
    if (a.lora != LoraMatrix::kB) continue;
    const AdapterOffsets& o = layout.adapters[layer][a.id];
    const ParamInfo& b = param_at(layout.params, o.b);
    const bool row = spec.part(a.id).role == Role::kRow;
    // This rank's rows of each piece: all of B's for one piece; else the pieces' widths when the
    // rank holds B whole, or the segment of each that tensor parallelism gives it.
    std::vector<int64_t> widths = {b.shape[0]};
    if (a.external.size() > 1 && b.placement.rows.size() == 1) {
      widths = lora_piece_rows(a);
    } else if (a.external.size() > 1) {
      widths.clear();
      for (const Placement::Rows& r : b.placement.rows) {
        check(r.copies == 1,
              "train.lora_targets: qkv adapters with mesh.tp ({}) above model.n_kv_head are not "
              "supported; target attn_out or lower mesh.tp",
              layout.sharding.tp);
        widths.push_back(r.count);
      }
    }
    const int64_t in = param_at(layout.params, o.a).shape[1];
    adapters_[int(a.id)] =
        std::make_unique<LoraAdapter>(ctx, o, row, in, spec.lora_rank, std::move(widths),
                                      float(spec.lora_scale), tp_group, format, u, du, x_scratch);
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
