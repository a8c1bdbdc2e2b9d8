#include "tessera/model/transformer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"

namespace tessera::model {

namespace k = kernels;

namespace {

bool is_gpt2(const ModelConfig& c) { return c.arch == Architecture::kGpt2; }

}  // namespace

// Hands out zeroed arena storage and totals the bytes requested (without alignment padding),
// so the model can report exactly what it keeps.
class Transformer::Allocator {
 public:
  explicit Allocator(Arena& arena) : arena_(arena) {}
  float* floats(int64_t n) {
    bytes_ += 4 * n;
    return arena_.allocate({n}, DType::f32).as<float>();
  }
  uint16_t* halves(int64_t n) {
    bytes_ += 2 * n;
    return static_cast<uint16_t*>(arena_.allocate({n}, DType::bf16).data);
  }
  int64_t bytes() const { return bytes_; }

 private:
  Arena& arena_;
  int64_t bytes_ = 0;
};

Transformer::Transformer(const ModelConfig& config, int64_t max_batch, int64_t max_seq,
                         bool training, const ModelOptions& options)
    : config_(config),
      options_(options),
      max_batch_(max_batch),
      max_seq_(max_seq),
      training_(training),
      low_(options.precision != Precision::kF32),
      layout_(model_layout(config)),
      arena_(Arena::counting()),
      store_(options.store),
      units_(parameter_units(layout_)),
      weights_(units_.size()),
      unit_grads_(units_.size(), nullptr) {
  check_runnable(config_);
  check(max_seq_ <= config_.max_seq, "sequence length {} exceeds model.max_seq {}", max_seq_,
        config_.max_seq);
  check(max_batch_ >= 1 && max_seq_ >= 1, "batch ({}) and sequence length ({}) must be positive",
        max_batch_, max_seq_);
  if (options_.weights == WeightFormat::kInt8) {
    check(!training_, "int8 weights are for inference: build the model with training=false");
    check(!config_.is_moe(),
          "int8 weights need dense MLPs, but the model has {} experts (model.moe.n_experts)",
          config_.moe.n_experts);
    check(!low_, "int8 weights multiply f32 activations: use precision f32 with them, not {}",
          precision_name(options_.precision));
    check(store_ == nullptr,
          "int8 weights are quantised from parameters the model keeps itself: build it without a "
          "parameter store");
    int8_ = std::make_unique<Int8Weights>(layout_);
  }
  if (store_ == nullptr) {
    std::optional<k::LowPrecision> low;
    if (low_) low = low_precision_of(options_.precision);
    resident_ = std::make_unique<ResidentParameters>(layout_, low, training_);
    store_ = resident_.get();
  }
  Arena counting = Arena::counting();
  Allocator counter(counting);
  allocate(counter);
  arena_ = Arena(counting.used());
  Allocator real(arena_);
  allocate(real);
  const int64_t N = max_batch_ * max_seq_;
  if (!training_) paged_chunks_.resize(N);
  const bool per_layer_moe = training_ && options_.recompute != Recompute::kFull;
  if (config_.is_moe()) {
    for (int64_t l = 0; l < (per_layer_moe ? config_.n_layer : 1); ++l) {
      moe_.push_back(std::make_unique<MoeLayer<float>>(config_, N));
    }
    expert_tokens_.assign(config_.n_layer, std::vector<int64_t>(config_.moe.n_experts, 0));
    if (per_layer_moe) saved_bytes_per_layer_ += 4 * MoeLayer<float>::activation_floats(config_, N);
  }
}

Transformer::~Transformer() = default;

void Transformer::allocate(Allocator& a) {
  const ModelConfig& c = config_;
  const int64_t N = max_batch_ * max_seq_, C = c.d_model, H = c.n_head, F = c.ffn();
  const int64_t Q = c.qkv_width(), HD = H * c.head_dim(), F_pre = c.mlp_hidden_width();
  const bool gpt2 = is_gpt2(c), moe = c.is_moe();
  auto matmul_input = [&](int64_t n, float* shared_f32) {
    MatmulInput x;
    x.f32 = low_ ? shared_f32 : a.floats(n);
    if (low_) x.low = a.halves(n);
    return x;
  };
  // What a block keeps in f32 unless fully recomputed: norm statistics, q/k/v, the attention
  // log-sum-exp, the residual after attention and the MLP's first matmul output.
  auto allocate_f32_state = [&](LayerActivations& x) {
    x.ln1_mean = gpt2 ? a.floats(N) : nullptr;
    x.ln1_rstd = a.floats(N);
    x.qkv = a.floats(N * Q);
    x.lse = a.floats(N * H);
    x.res_mid = a.floats(N * C);
    x.ln2_mean = gpt2 ? a.floats(N) : nullptr;
    x.ln2_rstd = a.floats(N);
    x.fch = moe ? nullptr : a.floats(N * F_pre);
  };
  // The working set every block shares: all of a block's activations when nothing is kept per
  // block (inference, full recompute), and the transient f32 copies of matmul inputs.
  const int64_t before_working = a.bytes();
  LayerActivations w;
  w.ln1 = {a.floats(N * C), low_ ? a.halves(N * C) : nullptr};
  w.atty = {a.floats(N * HD), low_ ? a.halves(N * HD) : nullptr};
  w.ln2 = {a.floats(N * C), low_ ? a.halves(N * C) : nullptr};
  w.act = moe ? MatmulInput{} : MatmulInput{a.floats(N * F), low_ ? a.halves(N * F) : nullptr};
  allocate_f32_state(w);
  w.res_out = a.floats(N * C);
  working_bytes_ = a.bytes() - before_working;

  acts_.assign(c.n_layer, w);
  if (training_) {
    const Recompute r = options_.recompute;
    for (int64_t l = 0; l < c.n_layer; ++l) {
      const int64_t before = a.bytes();
      LayerActivations& la = acts_[l];
      la.res_out = a.floats(N * C);
      if (r != Recompute::kFull) {
        if (r == Recompute::kNone) {
          la.ln1 = matmul_input(N * C, w.ln1.f32);
          la.ln2 = matmul_input(N * C, w.ln2.f32);
          if (!moe) la.act = matmul_input(N * F, w.act.f32);
        }
        la.atty = matmul_input(N * HD, w.atty.f32);
        allocate_f32_state(la);
      }
      saved_bytes_per_layer_ = a.bytes() - before;
    }
  }
  embedded_ = a.floats(N * C);
  lnf_ = {a.floats(N * C), low_ ? a.halves(N * C) : nullptr};
  lnf_mean_ = gpt2 ? a.floats(N) : nullptr;
  lnf_rstd_ = a.floats(N);
  logits_ = a.floats(N * c.vocab_size);
  losses_ = a.floats(N);
  scratch_threads_ = omp_get_max_threads();
  attention_scratch_ = a.floats(k::attention_scratch_size(max_seq_) * scratch_threads_);
  if (!training_) {
    decode_scratch_ = a.floats(k::paged_attention_scratch_size(c.max_seq) * scratch_threads_);
  }
  if (options_.weights == WeightFormat::kInt8) {
    int8_scratch_ = a.floats(k::int8_linear_scratch_size(std::max({C, HD, F})));
  }
  if (training_) {
    d_res_ = a.floats(N * C);
    d_c_ = a.floats(N * std::max(C, HD));
    d_qkv_ = a.floats(N * Q);
    d_hidden_ = moe ? nullptr : a.floats(N * (F_pre + (gpt2 ? 0 : F)));
    if (low_) dy_low_ = a.halves(N * std::max({C, Q, F_pre, c.vocab_size}));
  }
}

int64_t Transformer::num_parameters() const { return count_parameters(config_).total; }

int64_t Transformer::matmul_weight_bytes_per_token() const {
  if (int8_ != nullptr) return int8_->bytes();
  const ModelConfig& c = config_;
  const int64_t C = c.d_model, F = c.ffn(), dense = low_ ? 2 : 4;
  int64_t per_layer = dense * (c.qkv_width() * C + C * c.n_head * c.head_dim());
  if (c.is_moe()) {
    const int64_t routed = c.moe.top_k + c.moe.n_shared;  // SwiGLU experts of 3 F x C matrices
    per_layer += 4 * (c.moe.n_experts * C + routed * 3 * F * C);
  } else {
    per_layer += dense * (c.mlp_hidden_width() * C + C * F);
  }
  return c.n_layer * per_layer + dense * c.vocab_size * C;
}

int64_t Transformer::resident_parameter_bytes() const {
  if (resident_ == nullptr) return 0;
  const int64_t total = layout_.params.total();
  return 4 * total + (low_ ? 2 * total : 0) + (int8_ != nullptr ? int8_->bytes() : 0);
}

ResidentParameters& Transformer::resident() {
  check(resident_ != nullptr, "the model's parameters are held by its parameter store");
  return *resident_;
}

std::span<float> Transformer::params() {
  if (int8_ != nullptr) int8_->mark_stale();
  return resident().params();
}
std::span<float> Transformer::grads() {
  check(training_, "gradients of a model built for inference");
  return resident().grads();
}

void Transformer::init_weights(uint64_t seed) {
  const std::span<float> p = params();
  initial_parameters(config_, layout_, seed, 0, int64_t(p.size()), p.data());
}

void Transformer::acquire(int64_t unit) {
  weights_[unit] = store_->acquire(unit);
  if (int8_ != nullptr) int8_->refresh(unit, weights_[unit].f32);
}

void Transformer::release(int64_t unit) {
  store_->release(unit);
  weights_[unit] = {};
}

int64_t Transformer::unit_of(int64_t offset) const {
  const auto after =
      std::upper_bound(units_.begin(), units_.end(), offset,
                       [](int64_t o, const ParameterUnit& u) { return o < u.begin; });
  return int64_t(after - units_.begin()) - 1;
}

const float* Transformer::param(int64_t offset) const {
  const int64_t u = unit_of(offset);
  return weights_[u].f32 + (offset - units_[u].begin);
}

const uint16_t* Transformer::low_param(int64_t offset) const {
  const int64_t u = unit_of(offset);
  return weights_[u].low + (offset - units_[u].begin);
}

float* Transformer::grad(int64_t offset) const {
  const int64_t u = unit_of(offset);
  return unit_grads_[u] + (offset - units_[u].begin);
}

void Transformer::check_tokens(const int32_t* tokens, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    check(tokens[i] >= 0 && tokens[i] < config_.vocab_size,
          "token id {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
          config_.vocab_size);
  }
}

void Transformer::finish_input(const MatmulInput& x, int64_t n) {
  if (low_) k::cast_to_low(x.f32, x.low, n, low_precision_of(options_.precision));
}

void Transformer::norm_forward(const float* x, int64_t w, int64_t b, MatmulInput y, float* mean,
                               float* rstd, int64_t N) {
  const int64_t C = config_.d_model;
  if (is_gpt2(config_)) {
    k::layernorm_forward(x, param(w), param(b), y.f32, mean, rstd, N, C);
  } else {
    k::rmsnorm_forward(x, param(w), y.f32, rstd, N, C, float(config_.norm_eps));
  }
  finish_input(y, N * C);
}

void Transformer::norm_backward(const float* dy, const float* x, int64_t w, int64_t b,
                                const float* mean, const float* rstd, int64_t N) {
  const int64_t C = config_.d_model;
  if (is_gpt2(config_)) {
    k::layernorm_backward(dy, x, param(w), mean, rstd, d_res_, grad(w), grad(b), N, C);
  } else {
    k::rmsnorm_backward(dy, x, param(w), rstd, d_res_, grad(w), N, C);
  }
}

void Transformer::linear_forward(const MatmulInput& x, int64_t w, int64_t b, float* y, int64_t N,
                                 int64_t in, int64_t out) {
  const float* bias = b >= 0 ? param(b) : nullptr;
  if (int8_ != nullptr) {
    k::linear_forward_int8(x.f32, int8_->matrix(w), bias, y, N, int8_scratch_);
  } else if (low_) {
    k::linear_forward_low(x.low, low_param(w), bias, y, N, in, out,
                          low_precision_of(options_.precision));
  } else {
    k::linear_forward(x.f32, param(w), bias, y, N, in, out);
  }
}

void Transformer::linear_backward(const float* dy, const MatmulInput& x, int64_t w, int64_t b,
                                  float* dx, int64_t N, int64_t in, int64_t out) {
  float* dbias = b >= 0 ? grad(b) : nullptr;
  if (low_) {
    const k::LowPrecision p = low_precision_of(options_.precision);
    k::cast_to_low(dy, dy_low_, N * out, p);
    k::linear_backward_low(dy, dy_low_, x.low, low_param(w), dx, grad(w), dbias, N, in, out, p);
  } else {
    k::linear_backward(dy, x.f32, param(w), dx, grad(w), dbias, N, in, out);
  }
}

const float* Transformer::input_of(int64_t l) const {
  return l == 0 ? embedded_ : acts_[l - 1].res_out;
}

MoeWeights<float> Transformer::moe_weights(int64_t l) const {
  const BlockOffsets& o = layout_.blocks[l];
  auto at = [&](int64_t off) { return off >= 0 ? param(off) : nullptr; };
  return {at(o.router_w), at(o.experts_gate_up), at(o.experts_down), at(o.shared_gate_up),
          at(o.shared_down)};
}

MoeLayer<float>& Transformer::moe_for(int64_t l) { return *moe_[moe_.size() == 1 ? 0 : l]; }

std::span<const int64_t> Transformer::expert_tokens(int64_t layer) const {
  check(config_.is_moe() && layer >= 0 && layer < config_.n_layer,
        "expert_tokens: layer {} of a model with {} MoE layers", layer,
        config_.is_moe() ? config_.n_layer : 0);
  return expert_tokens_[layer];
}

void Transformer::embed(const int32_t* inputs, int64_t B, int64_t T) {
  const float* wpe = layout_.wpe >= 0 ? param(layout_.wpe) : nullptr;
  k::embedding_forward(inputs, param(layout_.wte), wpe, embedded_, B, T, config_.d_model);
}

void Transformer::block_forward(int64_t l, int64_t B, int64_t T) {
  const ModelConfig& c = config_;
  const BlockOffsets& o = layout_.blocks[l];
  const LayerActivations& a = acts_[l];
  const int64_t N = B * T, C = c.d_model, H = c.n_head, KVH = c.kv_heads(), hd = c.head_dim();
  norm_forward(input_of(l), o.ln1_w, o.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd, N);
  linear_forward(a.ln1, o.qkv_w, o.qkv_b, a.qkv, N, C, c.qkv_width());
  if (!is_gpt2(c)) k::rope_forward(a.qkv, B, T, H, KVH, hd, 0, c.rope_theta);
  k::attention_forward(a.qkv, a.atty.f32, a.lse, attention_scratch_, B, T, H, KVH, hd);
  finish_block(l, N);
}

// Like block_forward's attention, but each chunk's queries attend over its cached positions.
void Transformer::block_decode(int64_t l, const KvCacheView& cache, int64_t num_chunks, int64_t N) {
  const ModelConfig& c = config_;
  const BlockOffsets& o = layout_.blocks[l];
  const LayerActivations& a = acts_[l];
  const int64_t C = c.d_model, H = c.n_head, KVH = c.kv_heads(), hd = c.head_dim();
  const int64_t Q = c.qkv_width();
  norm_forward(input_of(l), o.ln1_w, o.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd, N);
  linear_forward(a.ln1, o.qkv_w, o.qkv_b, a.qkv, N, C, Q);
  const k::PagedKv kv{cache.k[l], cache.v[l], cache.block_tokens, KVH, hd};
  for (int64_t s = 0; s < num_chunks; ++s) {
    const k::PagedChunk& chunk = paged_chunks_[s];
    float* rows = a.qkv + chunk.row * Q;
    if (!is_gpt2(c)) k::rope_forward(rows, 1, chunk.n, H, KVH, hd, chunk.start, c.rope_theta);
    k::paged_kv_write(rows + H * hd, rows + (H + KVH) * hd, Q, kv, chunk);
  }
  k::paged_attention_forward(a.qkv, Q, a.atty.f32, H * hd, kv, paged_chunks_.data(), num_chunks, H,
                             decode_scratch_, c.max_seq);
  finish_block(l, N);
}

// The rest of a block once attention has written atty: projection, residual, norm, MLP (dense or
// mixture of experts), residual.
void Transformer::finish_block(int64_t l, int64_t N) {
  const ModelConfig& c = config_;
  const BlockOffsets& o = layout_.blocks[l];
  const LayerActivations& a = acts_[l];
  const int64_t C = c.d_model, HD = c.n_head * c.head_dim(), F = c.ffn();
  const float* x = input_of(l);
  finish_input(a.atty, N * HD);
  linear_forward(a.atty, o.proj_w, o.proj_b, a.res_mid, N, HD, C);
  k::add(x, a.res_mid, a.res_mid, N * C);
  norm_forward(a.res_mid, o.ln2_w, o.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd, N);
  if (c.is_moe()) {
    aux_loss_ += moe_for(l).forward(a.ln2.f32, a.res_out, N, moe_weights(l));
  } else {
    linear_forward(a.ln2, o.fc_w, o.fc_b, a.fch, N, C, c.mlp_hidden_width());
    if (is_gpt2(c)) {
      k::gelu_forward(a.fch, a.act.f32, N * F);
    } else {
      k::swiglu_forward(a.fch, a.act.f32, N, F);
    }
    finish_input(a.act, N * F);
    linear_forward(a.act, o.fcproj_w, o.fcproj_b, a.res_out, N, F, C);
  }
  k::add(a.res_mid, a.res_out, a.res_out, N * C);
}

void Transformer::check_threads() const {
  check(omp_get_max_threads() <= scratch_threads_,
        "thread count rose from {} to {} after the model was built", scratch_threads_,
        omp_get_max_threads());
}

template <typename Block>
void Transformer::for_each_block(Block&& block) {
  aux_loss_ = 0;
  dropped_ = 0;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    acquire(1 + l);
    block(l);
    release(1 + l);
    if (config_.is_moe()) {
      const auto counts = moe_for(l).tokens_per_expert();
      std::copy(counts.begin(), counts.end(), expert_tokens_[l].begin());
      dropped_ += moe_for(l).dropped();
    }
  }
}

void Transformer::run_blocks(const int32_t* inputs, int64_t B, int64_t T) {
  check(B >= 1 && B <= max_batch_ && T >= 1 && T <= max_seq_,
        "batch {} x {} tokens does not fit the model's buffers of {} x {}", B, T, max_batch_,
        max_seq_);
  check_threads();
  check_tokens(inputs, B * T);
  acquire(0);
  embed(inputs, B, T);
  for_each_block([&](int64_t l) { block_forward(l, B, T); });
  norm_forward(acts_.back().res_out, layout_.lnf_w, layout_.lnf_b, lnf_, lnf_mean_, lnf_rstd_,
               B * T);
}

float Transformer::loss_over_logits(const int32_t* targets, int64_t N, float grad_scale) {
  check_tokens(targets, N);
  k::softmax_cross_entropy(logits_, targets, losses_, N, config_.vocab_size, grad_scale);
  double sum = 0;
  for (int64_t i = 0; i < N; ++i) sum += losses_[i];
  return float(sum / N);
}

void Transformer::compute_logits(const int32_t* inputs, int64_t B, int64_t T) {
  run_blocks(inputs, B, T);
  linear_forward(lnf_, layout_.lm_head, -1, logits_, B * T, config_.d_model, config_.vocab_size);
}

float Transformer::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  compute_logits(inputs, B, T);
  release(0);
  return targets == nullptr ? 0.0f : loss_over_logits(targets, B * T, 0.0f);
}

const float* Transformer::next_token_logits(const int32_t* tokens, int64_t T) {
  run_blocks(tokens, 1, T);
  const int64_t C = config_.d_model, last = (T - 1) * C;
  const MatmulInput row{lnf_.f32 + last, low_ ? lnf_.low + last : nullptr};
  linear_forward(row, layout_.lm_head, -1, logits_, 1, C, config_.vocab_size);
  release(0);
  return logits_;
}

const float* Transformer::decode(const KvCacheView& cache, std::span<const DecodeChunk> chunks) {
  const ModelConfig& c = config_;
  check(!training_, "decode: the model was built for training; build it with training=false");
  check(int64_t(cache.k.size()) == c.n_layer && int64_t(cache.v.size()) == c.n_layer,
        "decode: the cache holds {} key and {} value layers but the model has {}", cache.k.size(),
        cache.v.size(), c.n_layer);
  check(cache.block_tokens >= 1, "decode: the cache's blocks hold {} tokens", cache.block_tokens);
  check(!chunks.empty(), "decode: no sequences to run");
  const int64_t C = c.d_model, num_chunks = int64_t(chunks.size());
  int64_t N = 0;
  for (int64_t s = 0; s < num_chunks; ++s) {
    const DecodeChunk& d = chunks[s];
    check(d.n >= 1 && d.start >= 0, "decode: sequence {} has {} new tokens at position {}", s, d.n,
          d.start);
    check(d.start + d.n <= c.max_seq,
          "decode: sequence {} would reach {} tokens, past the model's context of {} "
          "(model.max_seq)",
          s, d.start + d.n, c.max_seq);
    check(int64_t(d.block_table.size()) * cache.block_tokens >= d.start + d.n,
          "decode: sequence {} has {} blocks of {} tokens but needs room for {}; reserve them in "
          "the cache first",
          s, d.block_table.size(), cache.block_tokens, d.start + d.n);
    check(N + d.n <= max_batch_ * max_seq_,
          "decode: the chunks hold more than the {} tokens the model's buffers take (max_batch {} "
          "x max_seq {})",
          max_batch_ * max_seq_, max_batch_, max_seq_);
    check_tokens(d.tokens, d.n);
    paged_chunks_[s] = {d.block_table.data(), d.start, d.n, N};
    N += d.n;
  }
  check_threads();
  acquire(0);
  const float* wpe = layout_.wpe >= 0 ? param(layout_.wpe) : nullptr;
  for (int64_t s = 0; s < num_chunks; ++s) {
    const k::PagedChunk& chunk = paged_chunks_[s];
    k::embedding_forward(chunks[s].tokens, param(layout_.wte),
                         wpe != nullptr ? wpe + chunk.start * C : nullptr,
                         embedded_ + chunk.row * C, 1, chunk.n, C);
  }
  for_each_block([&](int64_t l) { block_decode(l, cache, num_chunks, N); });
  // Only each chunk's last row needs logits; the embeddings are spent, so their rows hold them.
  for (int64_t s = 0; s < num_chunks; ++s) {
    const k::PagedChunk& chunk = paged_chunks_[s];
    std::memcpy(embedded_ + s * C, acts_.back().res_out + (chunk.row + chunk.n - 1) * C,
                sizeof(float) * C);
  }
  norm_forward(embedded_, layout_.lnf_w, layout_.lnf_b, lnf_, lnf_mean_, lnf_rstd_, num_chunks);
  linear_forward(lnf_, layout_.lm_head, -1, logits_, num_chunks, C, c.vocab_size);
  release(0);
  return logits_;
}

void Transformer::zero_grad() {
  const std::span<float> g = grads();
  std::fill(g.begin(), g.end(), 0.0f);
}

float Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B,
                                    int64_t T, float loss_scale) {
  check(training_, "forward_backward on a model built for inference");
  compute_logits(inputs, B, T);
  const float loss = loss_over_logits(targets, B * T, loss_scale / float(B * T));
  backward(inputs, B, T, loss_scale);
  release(0);
  return loss;
}

// Brings back what selective recomputation dropped: the norm outputs and the MLP activation.
// With MoE in low precision the router needs the f32 norm output, which is transient too.
void Transformer::recompute_selected(int64_t l, int64_t N) {
  const BlockOffsets& o = layout_.blocks[l];
  const LayerActivations& a = acts_[l];
  norm_forward(input_of(l), o.ln1_w, o.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd, N);
  norm_forward(a.res_mid, o.ln2_w, o.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd, N);
  if (config_.is_moe()) return;
  const int64_t F = config_.ffn();
  if (is_gpt2(config_)) {
    k::gelu_forward(a.fch, a.act.f32, N * F);
  } else {
    k::swiglu_forward(a.fch, a.act.f32, N, F);
  }
  finish_input(a.act, N * F);
}

// On entry d_res_ holds d(loss)/d(block output); on exit d(loss)/d(block input).
void Transformer::block_backward(int64_t l, int64_t B, int64_t T) {
  const ModelConfig& c = config_;
  const BlockOffsets& o = layout_.blocks[l];
  const LayerActivations& a = acts_[l];
  const int64_t N = B * T, C = c.d_model, H = c.n_head, KVH = c.kv_heads(), hd = c.head_dim();
  const int64_t HD = H * hd, F = c.ffn(), F_pre = c.mlp_hidden_width();
  if (options_.recompute == Recompute::kFull) {
    const double aux = aux_loss_;
    block_forward(l, B, T);
    aux_loss_ = aux;
  } else if (options_.recompute == Recompute::kSelective || (low_ && c.is_moe())) {
    recompute_selected(l, N);
  }
  // The residual connection passes d_res_ through unchanged; each branch adds its part.
  if (c.is_moe()) {
    auto at = [&](int64_t off) { return off >= 0 ? grad(off) : nullptr; };
    const MoeGrads<float> grads{at(o.router_w), at(o.experts_gate_up), at(o.experts_down),
                                at(o.shared_gate_up), at(o.shared_down)};
    moe_for(l).backward(d_res_, a.ln2.f32, d_c_, N, moe_weights(l), grads, loss_scale_);
  } else {
    float* d_act = d_hidden_;
    float* d_pre = is_gpt2(c) ? d_hidden_ : d_hidden_ + N * F;
    linear_backward(d_res_, a.act, o.fcproj_w, o.fcproj_b, d_act, N, F, C);
    if (is_gpt2(c)) {
      k::gelu_backward(d_act, a.fch, d_pre, N * F);
    } else {
      k::swiglu_backward(d_act, a.fch, d_pre, N, F);
    }
    linear_backward(d_pre, a.ln2, o.fc_w, o.fc_b, d_c_, N, C, F_pre);
  }
  norm_backward(d_c_, a.res_mid, o.ln2_w, o.ln2_b, a.ln2_mean, a.ln2_rstd, N);
  linear_backward(d_res_, a.atty, o.proj_w, o.proj_b, d_c_, N, HD, C);
  k::attention_backward(d_c_, a.qkv, a.lse, d_qkv_, attention_scratch_, B, T, H, KVH, hd);
  if (!is_gpt2(c)) k::rope_backward(d_qkv_, B, T, H, KVH, hd, 0, c.rope_theta);
  linear_backward(d_qkv_, a.ln1, o.qkv_w, o.qkv_b, d_c_, N, C, c.qkv_width());
  norm_backward(d_c_, input_of(l), o.ln1_w, o.ln1_b, a.ln1_mean, a.ln1_rstd, N);
}

void Transformer::backward(const int32_t* inputs, int64_t B, int64_t T, float loss_scale) {
  const int64_t N = B * T, C = config_.d_model;
  loss_scale_ = loss_scale;
  unit_grads_[0] = store_->gradients(0);
  // logits_ now holds d(loss)/d(logits).
  linear_backward(logits_, lnf_, layout_.lm_head, -1, d_c_, N, C, config_.vocab_size);
  std::memset(d_res_, 0, sizeof(float) * N * C);
  norm_backward(d_c_, acts_.back().res_out, layout_.lnf_w, layout_.lnf_b, lnf_mean_, lnf_rstd_, N);
  for (int64_t l = config_.n_layer - 1; l >= 0; --l) {
    const int64_t u = 1 + l;
    acquire(u);
    unit_grads_[u] = store_->gradients(u);
    block_backward(l, B, T);
    store_->gradients_done(u);
    unit_grads_[u] = nullptr;
    release(u);
  }
  float* dwpe = layout_.wpe >= 0 ? grad(layout_.wpe) : nullptr;
  k::embedding_backward(d_res_, inputs, grad(layout_.wte), dwpe, B, T, C);
  store_->gradients_done(0);
  unit_grads_[0] = nullptr;
}

}  // namespace tessera::model
