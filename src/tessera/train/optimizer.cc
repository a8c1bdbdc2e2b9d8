#include "tessera/train/optimizer.h"

#include <cmath>

#include "tessera/kernels/ops.h"

namespace tessera::train {

AdamW::AdamW(const model::ParameterLayout& layout, const TrainConfig& config)
    : layout_(layout), config_(config), arena_(2 * sizeof(float) * layout.total() + 128) {
  m_ = arena_.allocate({layout.total()}, DType::f32).as<float>();
  v_ = arena_.allocate({layout.total()}, DType::f32).as<float>();
}

void AdamW::step(std::span<float> params, std::span<const float> grads, double lr) {
  ++steps_taken_;
  for (const model::ParamInfo& p : layout_.entries()) {
    kernels::AdamWParams hp{lr,
                            config_.beta1,
                            config_.beta2,
                            config_.eps,
                            p.decay ? config_.weight_decay : 0.0,
                            steps_taken_};
    kernels::adamw_update<float>(params.data() + p.offset, grads.data() + p.offset, m_ + p.offset,
                                 v_ + p.offset, p.shape.numel(), hp);
  }
}

std::vector<NamedTensor> AdamW::state_tensors() {
  std::vector<NamedTensor> out = model::named_views(layout_, m_, "adamw.m.");
  for (NamedTensor& t : model::named_views(layout_, v_, "adamw.v.")) out.push_back(std::move(t));
  return out;
}

double clip_grad_norm(std::span<float> grads, double max_norm) {
  double norm = std::sqrt(kernels::sum_squares<float>(grads.data(), grads.size()));
  if (max_norm > 0 && norm > max_norm) {
    kernels::scale<float>(grads.data(), float(max_norm / (norm + 1e-6)), grads.size());
  }
  return norm;
}

}  // namespace tessera::train
