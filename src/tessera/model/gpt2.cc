#include "tessera/model/gpt2.h"

#include <omp.h>

#include <cmath>
#include <cstring>

#include "tessera/core/rng.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

Gpt2::Gpt2(const ModelConfig& config, int64_t max_batch, int64_t max_seq, bool training)
    : config_(config),
      max_batch_(max_batch),
      max_seq_(max_seq),
      training_(training),
      arena_(Arena::counting()) {
  validate(config_);
  check(max_seq_ <= config_.max_seq, "sequence length {} exceeds model.max_seq {}", max_seq_,
        config_.max_seq);
  check(max_batch_ >= 1 && max_seq_ >= 1, "batch ({}) and sequence length ({}) must be positive",
        max_batch_, max_seq_);
  build_layout();
  Arena counting = Arena::counting();
  allocate(counting);
  arena_ = Arena(counting.used());
  allocate(arena_);
}

void Gpt2::build_layout() {
  const int64_t C = config_.d_model;
  layout_.add("wte.weight", {config_.vocab_size, C}, true);
  wpe_offset_ = layout_.add("wpe.weight", {config_.max_seq, C}, true);
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    std::string p = fmt::format("blocks.{}.", l);
    LayerOffsets o;
    o.ln1_w = layout_.add(p + "ln1.weight", {C}, false);
    o.ln1_b = layout_.add(p + "ln1.bias", {C}, false);
    o.qkv_w = layout_.add(p + "attn.qkv.weight", {3 * C, C}, true);
    o.qkv_b = layout_.add(p + "attn.qkv.bias", {3 * C}, false);
    o.proj_w = layout_.add(p + "attn.proj.weight", {C, C}, true);
    o.proj_b = layout_.add(p + "attn.proj.bias", {C}, false);
    o.ln2_w = layout_.add(p + "ln2.weight", {C}, false);
    o.ln2_b = layout_.add(p + "ln2.bias", {C}, false);
    o.fc_w = layout_.add(p + "fc.weight", {4 * C, C}, true);
    o.fc_b = layout_.add(p + "fc.bias", {4 * C}, false);
    o.fcproj_w = layout_.add(p + "fcproj.weight", {C, 4 * C}, true);
    o.fcproj_b = layout_.add(p + "fcproj.bias", {C}, false);
    layers_.push_back(o);
  }
  lnf_w_offset_ = layout_.add("lnf.weight", {C}, false);
  lnf_b_offset_ = layout_.add("lnf.bias", {C}, false);
}

void Gpt2::allocate(Arena& arena) {
  const int64_t BT = max_batch_ * max_seq_, C = config_.d_model, H = config_.n_head;
  auto floats = [&](int64_t n) { return arena.allocate({n}, DType::f32).as<float>(); };
  params_ = floats(layout_.total());
  grads_ = training_ ? floats(layout_.total()) : nullptr;
  // Inference reuses one set of layer activations for every layer.
  int64_t kept_layers = training_ ? config_.n_layer : 1;
  acts_.clear();
  for (int64_t l = 0; l < kept_layers; ++l) {
    LayerActivations a;
    a.ln1 = floats(BT * C);
    a.ln1_mean = floats(BT);
    a.ln1_rstd = floats(BT);
    a.qkv = floats(BT * 3 * C);
    a.atty = floats(BT * C);
    a.lse = floats(BT * H);
    a.res_mid = floats(BT * C);
    a.ln2 = floats(BT * C);
    a.ln2_mean = floats(BT);
    a.ln2_rstd = floats(BT);
    a.fch = floats(BT * 4 * C);
    a.fch_gelu = floats(BT * 4 * C);
    a.res_out = floats(BT * C);
    acts_.push_back(a);
  }
  embedded_ = floats(BT * C);
  lnf_ = floats(BT * C);
  lnf_mean_ = floats(BT);
  lnf_rstd_ = floats(BT);
  logits_ = floats(BT * config_.vocab_size);
  losses_ = floats(BT);
  scratch_threads_ = omp_get_max_threads();
  attention_scratch_ = floats(k::attention_scratch_size(max_seq_) * scratch_threads_);
  if (training_) {
    d_res_ = floats(BT * C);
    d_c_ = floats(BT * C);
    d_3c_ = floats(BT * 3 * C);
    d_4c_ = floats(BT * 4 * C);
  }
}

int64_t Gpt2::num_parameters() const {
  int64_t n = 0;
  for (const ParamInfo& p : layout_.entries()) n += p.shape.numel();
  return n;
}

void Gpt2::init_weights(uint64_t seed) {
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.n_layer);
  const auto& entries = layout_.entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    const ParamInfo& p = entries[i];
    float* w = params_ + p.offset;
    const int64_t n = p.shape.numel();
    const bool is_norm = p.name.find("ln") != std::string::npos;
    if (p.shape.rank() == 1) {
      float value = is_norm && p.name.ends_with(".weight") ? 1.0f : 0.0f;
      for (int64_t j = 0; j < n; ++j) w[j] = value;
      continue;
    }
    const bool residual = p.name.ends_with("proj.weight");
    const double std = residual ? residual_std : 0.02;
    CounterRng rng(seed, i);
#pragma omp parallel for schedule(static)
    for (int64_t j = 0; j < n; ++j) w[j] = float(std * rng.normal(j));
  }
}

void Gpt2::check_tokens(const int32_t* tokens, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    check(tokens[i] >= 0 && tokens[i] < config_.vocab_size,
          "token id {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
          config_.vocab_size);
  }
}

void Gpt2::run_blocks(const int32_t* inputs, int64_t B, int64_t T) {
  check(B >= 1 && B <= max_batch_ && T >= 1 && T <= max_seq_,
        "batch {} x {} tokens does not fit the model's buffers of {} x {}", B, T, max_batch_,
        max_seq_);
  check(omp_get_max_threads() <= scratch_threads_,
        "thread count rose from {} to {} after the model was built", scratch_threads_,
        omp_get_max_threads());
  check_tokens(inputs, B * T);
  const int64_t C = config_.d_model, H = config_.n_head, BT = B * T;
  k::embedding_forward(inputs, params_, params_ + wpe_offset_, embedded_, B, T, C);
  const float* x = embedded_;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const LayerOffsets& o = layers_[l];
    const float* P = params_;
    const LayerActivations& a = acts_[training_ ? l : 0];
    k::layernorm_forward(x, P + o.ln1_w, P + o.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd, BT, C);
    k::linear_forward(a.ln1, P + o.qkv_w, P + o.qkv_b, a.qkv, BT, C, 3 * C);
    k::attention_forward(a.qkv, a.atty, a.lse, attention_scratch_, B, T, C, H);
    k::linear_forward(a.atty, P + o.proj_w, P + o.proj_b, a.res_mid, BT, C, C);
    k::add(x, a.res_mid, a.res_mid, BT * C);
    k::layernorm_forward(a.res_mid, P + o.ln2_w, P + o.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd, BT, C);
    k::linear_forward(a.ln2, P + o.fc_w, P + o.fc_b, a.fch, BT, C, 4 * C);
    k::gelu_forward(a.fch, a.fch_gelu, BT * 4 * C);
    k::linear_forward(a.fch_gelu, P + o.fcproj_w, P + o.fcproj_b, a.res_out, BT, 4 * C, C);
    k::add(a.res_mid, a.res_out, a.res_out, BT * C);
    x = a.res_out;
  }
  k::layernorm_forward(x, params_ + lnf_w_offset_, params_ + lnf_b_offset_, lnf_, lnf_mean_,
                       lnf_rstd_, BT, C);
}

float Gpt2::loss_over_logits(const int32_t* targets, int64_t BT, float grad_scale) {
  check_tokens(targets, BT);
  k::softmax_cross_entropy(logits_, targets, losses_, BT, config_.vocab_size, grad_scale);
  double sum = 0;
  for (int64_t i = 0; i < BT; ++i) sum += losses_[i];
  return float(sum / BT);
}

void Gpt2::compute_logits(const int32_t* inputs, int64_t B, int64_t T) {
  run_blocks(inputs, B, T);
  k::linear_forward<float>(lnf_, params_, nullptr, logits_, B * T, config_.d_model,
                           config_.vocab_size);
}

float Gpt2::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  compute_logits(inputs, B, T);
  return targets == nullptr ? 0.0f : loss_over_logits(targets, B * T, 0.0f);
}

const float* Gpt2::next_token_logits(const int32_t* tokens, int64_t T) {
  run_blocks(tokens, 1, T);
  const int64_t C = config_.d_model;
  k::linear_forward<float>(lnf_ + (T - 1) * C, params_, nullptr, logits_, 1, C, config_.vocab_size);
  return logits_;
}

void Gpt2::zero_grad() {
  check(training_, "zero_grad on a model built for inference");
  std::memset(grads_, 0, sizeof(float) * layout_.total());
}

float Gpt2::forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                             float loss_scale) {
  check(training_, "forward_backward on a model built for inference");
  compute_logits(inputs, B, T);
  float loss = loss_over_logits(targets, B * T, loss_scale / float(B * T));
  backward(inputs, B, T);
  return loss;
}

void Gpt2::backward(const int32_t* inputs, int64_t B, int64_t T) {
  const int64_t BT = B * T, C = config_.d_model, H = config_.n_head, V = config_.vocab_size;
  // logits_ now holds d(loss)/d(logits); the output projection is the tied embedding.
  k::linear_backward<float>(logits_, lnf_, params_, d_c_, grads_, nullptr, BT, C, V);
  std::memset(d_res_, 0, sizeof(float) * BT * C);
  k::layernorm_backward(d_c_, acts_.back().res_out, params_ + lnf_w_offset_, lnf_mean_, lnf_rstd_,
                        d_res_, grads_ + lnf_w_offset_, grads_ + lnf_b_offset_, BT, C);

  for (int64_t l = config_.n_layer - 1; l >= 0; --l) {
    const LayerOffsets& o = layers_[l];
    const float* P = params_;
    float* G = grads_;
    const LayerActivations& a = acts_[l];
    const float* x = l == 0 ? embedded_ : acts_[l - 1].res_out;
    // d_res_ holds d(loss)/d(res_out); the residual connection passes it through unchanged.
    k::linear_backward(d_res_, a.fch_gelu, P + o.fcproj_w, d_4c_, G + o.fcproj_w, G + o.fcproj_b,
                       BT, 4 * C, C);
    k::gelu_backward(d_4c_, a.fch, d_4c_, BT * 4 * C);
    k::linear_backward(d_4c_, a.ln2, P + o.fc_w, d_c_, G + o.fc_w, G + o.fc_b, BT, C, 4 * C);
    k::layernorm_backward(d_c_, a.res_mid, P + o.ln2_w, a.ln2_mean, a.ln2_rstd, d_res_, G + o.ln2_w,
                          G + o.ln2_b, BT, C);
    k::linear_backward(d_res_, a.atty, P + o.proj_w, d_c_, G + o.proj_w, G + o.proj_b, BT, C, C);
    k::attention_backward(d_c_, a.qkv, a.lse, d_3c_, attention_scratch_, B, T, C, H);
    k::linear_backward(d_3c_, a.ln1, P + o.qkv_w, d_c_, G + o.qkv_w, G + o.qkv_b, BT, C, 3 * C);
    k::layernorm_backward(d_c_, x, P + o.ln1_w, a.ln1_mean, a.ln1_rstd, d_res_, G + o.ln1_w,
                          G + o.ln1_b, BT, C);
  }
  k::embedding_backward(d_res_, inputs, grads_, grads_ + wpe_offset_, B, T, C);
}

}  // namespace tessera::model
