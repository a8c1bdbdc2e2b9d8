#include "tessera/model/transformer.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/core/trace.h"
#include "tessera/kernels/device.h"
#include "tessera/kernels/int8_linear.h"
#include "tessera/kernels/low_precision.h"
#include "tessera/kernels/ops.h"
#include "tessera/model/device_support.h"
#include "tessera/model/serving_memory.h"
#include "tessera/model/transformer_access.h"

namespace tessera::model {

namespace k = kernels;

namespace {

ModelParallel with_defaults(const ModelParallel* p, Collectives* alone) {
  ModelParallel out = p != nullptr ? *p : ModelParallel{};
  if (out.tp == nullptr) out.tp = alone;
  if (out.ep == nullptr) out.ep = alone;
  if (out.batch == nullptr) out.batch = alone;
  check(out.tp->size() == out.sharding.tp && out.ep->size() == out.sharding.ep,
        "the model's tensor- and expert-parallel groups ({} and {} ranks) do not match its "
        "sharding (tp {}, ep {})",
        out.tp->size(), out.ep->size(), out.sharding.tp, out.sharding.ep);
  return out;
}

// What the options allow: micro-batches in flight and a split backward for training, int8
// weights for a dense f32 inference model that keeps its own parameters.
void check_options(const ModelConfig& config, const ModelOptions& options, bool training) {
  check(options.in_flight >= 1 && (training || options.in_flight == 1),
        "a model holds 1 or more micro-batches in flight, and only for training; got {}",
        options.in_flight);
  check(training || !options.split_backward,
        "a model built for inference has no backward to split");
  if (options.weights != WeightFormat::kInt8) return;
  check(!training, "int8 weights are for inference: build the model with training=false");
  check(!config.is_moe(),
        "int8 weights need dense MLPs, but the model has {} experts (model.moe.n_experts)",
        config.moe.n_experts);
  check(options.precision == Precision::kF32,
        "int8 weights multiply f32 activations: use precision f32 with them, not {}",
        enum_name(options.precision));
  check(options.store == nullptr,
        "int8 weights are quantised from parameters the model keeps itself: build it without a "
        "parameter store");
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, int64_t max_batch, int64_t max_seq,
                         bool training, const ModelOptions& options)
    : config_(config),
      options_(options),
      ctx_(options.context != nullptr ? *options.context : k::kCpuContext),
      parallel_(with_defaults(options.parallel, &alone_)),
      max_batch_(max_batch),
      max_seq_(max_seq),
      training_(training),
      format_{options.precision != Precision::kF32, options.precision != Precision::kF32
                                                        ? low_precision_of(options.precision)
                                                        : k::LowPrecision::kBf16},
      layout_(model::model_layout(config, parallel_.sharding)),
      tp_(parallel_, config.d_model),
      arena_(Arena::counting()),
      store_(options.store),
      weights_(layout_.units.size()),
      unit_grads_(layout_.units.size(), nullptr),
      access_(std::make_unique<Access>(*this)) {
  check_runnable(config_);
  check_options(config_, options_, training_);
  check(max_seq_ <= config_.max_seq, "sequence length {} exceeds model.max_seq {}", max_seq_,
        config_.max_seq);
  check(max_batch_ >= 1 && max_seq_ >= 1, "batch ({}) and sequence length ({}) must be positive",
        max_batch_, max_seq_);
  const int64_t N = max_batch_ * max_seq_;
  if (tp_.sequence_parallel()) {
    check(N % tp_.ranks() == 0,
          "sequence parallelism splits a micro-batch's {} tokens over {} tensor-parallel ranks: "
          "make batch x seq_len a multiple of mesh.tp",
          N, tp_.ranks());
  }
  check_device_runs(ctx_.device.kind,
                    {.tp = tp_.ranks(),
                     .moe = config_.is_moe(),
                     .int8_weights = options_.weights == WeightFormat::kInt8,
                     .qk_norm = config_.qk_norm},
                    fmt::format("a model built on {} device {}", enum_name(ctx_.device.kind),
                                ctx_.device.ordinal));
  if (options_.weights == WeightFormat::kInt8) int8_ = std::make_unique<Int8Weights>(layout_);
  if (store_ == nullptr) {
    std::optional<k::LowPrecision> low;
    if (format_.low) low = format_.precision;
    resident_ = std::make_unique<ResidentParameters>(ctx_, layout_, low, training_);
    store_ = resident_.get();
  }
  scratch_threads_ = omp_get_max_threads();
  const ActivationOptions activation_options{max_batch_,
                                             max_seq_,
                                             training_,
                                             options_.precision,
                                             options_.recompute,
                                             options_.weights,
                                             tp_.sequence_parallel(),
                                             scratch_threads_,
                                             parallel_.batch->size(),
                                             options_.in_flight,
                                             options_.split_backward};
  {
    Arena counting = Arena::counting();
    Allocator counter(counting);
    allocate_activations(config_, layout_, activation_options, counter);
    if (ctx_.on_cuda()) {
      device_activations_ = k::DeviceArray<std::byte>(ctx_, int64_t(counting.used()));
      arena_ = Arena::over(device_activations_.data(), counting.used());
      device_tokens_ = k::DeviceArray<int32_t>(ctx_, 2 * N);
      host_losses_.resize(N);
    } else {
      arena_ = Arena(counting.used());
    }
  }
  Allocator real(arena_);
  acts_ = allocate_activations(config_, layout_, activation_options, real);
  activation_bytes_ = activation_bytes(config_, parallel_.sharding, activation_options);
  if (!training_) {
    paged_chunks_.resize(N);
    decode_tokens_.resize(N);
  }
  slots_.resize(options_.in_flight);

  const int64_t blocks = int64_t(layout_.blocks.size());
  if (config_.is_moe()) {
    // One layer per block and slot when they keep their activations, else one for them all.
    const bool per_layer = training_ && options_.recompute != Recompute::kFull;
    const MoeParallel moe_parallel{parallel_.ep, parallel_.batch, parallel_.batch->size()};
    std::shared_ptr<MoeScratch<float>> scratch;
    for (int64_t l = 0; l < (per_layer ? blocks * options_.in_flight : 1); ++l) {
      moe_.push_back(std::make_unique<MoeLayer<float>>(ctx_, config_, N, moe_parallel, scratch));
      scratch = moe_.back()->scratch();
    }
    expert_tokens_.assign(blocks, std::vector<int64_t>(config_.moe.n_experts, 0));
  }
  const BlockWorkspace& ws = acts_.workspace;
  if (layout_.has_embedding) {
    embedding_ = std::make_unique<Embedding>(ctx_, layout_, tp_, parallel_.tp, ws.parallel,
                                             acts_.position_grads);
  }
  for (int64_t l = 0; l < blocks; ++l) {
    MoeLayer<float>* moe = moe_.empty() ? nullptr : moe_[moe_.size() == 1 ? 0 : l].get();
    blocks_.push_back(std::make_unique<Block>(ctx_, layout_.spec, layout_, l, parallel_, format_,
                                              ws, acts_.blocks[l], moe, config_.max_seq));
  }
  if (layout_.has_head) {
    const HeadBuffers head{acts_.lnf,         acts_.lnf_mean,
                           acts_.lnf_rstd,    acts_.logits,
                           acts_.losses,      acts_.row_stats,
                           acts_.rank_maxima, ctx_.on_cuda() ? host_losses_.data() : nullptr};
    head_ = std::make_unique<Head>(ctx_, layout_, tp_, parallel_.tp, format_, ws.parallel,
                                   ws.dy_low, ws.int8_scratch, head);
  }
}

Transformer::~Transformer() = default;

int64_t Transformer::num_parameters() const { return count_parameters(config_).total; }

int64_t Transformer::matmul_weight_bytes_per_token() const {
  return int64_t(matmul_weight_reads(layout_, options_.precision, options_.weights).per_token());
}

int64_t Transformer::resident_parameter_bytes() const {
  if (resident_ == nullptr) return 0;
  const int64_t total = layout_.params.total();
  return 4 * total + (format_.low ? 2 * total : 0) + (int8_ != nullptr ? int8_->bytes() : 0);
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
  initial_parameters(layout_, seed, 0, int64_t(p.size()), p.data());
}

void Transformer::acquire(int64_t unit) {
  weights_[unit] = store_->acquire(unit);
  if (int8_ != nullptr) int8_->refresh(unit, weights_[unit].f32);
}

void Transformer::release(int64_t unit) {
  store_->release(unit);
  weights_[unit] = {};
}

void Transformer::acquire_block(int64_t l) {
  acquire(1 + l);
  if (layout_.has_experts()) acquire(layout_.expert_unit(l));
}

void Transformer::release_block(int64_t l) {
  if (layout_.has_experts()) release(layout_.expert_unit(l));
  release(1 + l);
}

void Transformer::check_tokens(const int32_t* tokens, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    check(tokens[i] >= 0 && tokens[i] < config_.vocab_size,
          "token id {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
          config_.vocab_size);
  }
}

const int32_t* Transformer::tokens_for_kernels(const int32_t* tokens, int64_t n, int64_t at) {
  if (!ctx_.on_cuda()) return tokens;
  int32_t* on_device = device_tokens_.data() + at;
  k::copy_to_device(ctx_, on_device, tokens, sizeof(int32_t) * size_t(n));
  return on_device;
}

const float* Transformer::input_of(int64_t l) const {
  return l == 0 ? acts_.slot_inputs[slot_] : acts_.slot_blocks[slot_][l - 1].res_out;
}

void Transformer::select_slot(int64_t slot) {
  check(slot >= 0 && slot < options_.in_flight,
        "micro-batch slot {} of a model built for {} in flight", slot, options_.in_flight);
  if (slot == slot_) return;
  slot_ = slot;
  const int64_t blocks = int64_t(blocks_.size());
  for (int64_t l = 0; l < blocks; ++l) {
    MoeLayer<float>* moe =
        moe_.empty() ? nullptr : moe_[moe_.size() == 1 ? 0 : slot * blocks + l].get();
    blocks_[l]->bind(acts_.slot_blocks[slot][l], moe);
  }
}

std::span<const int64_t> Transformer::expert_tokens(int64_t layer) const {
  const int64_t blocks = int64_t(blocks_.size());
  check(config_.is_moe() && layer >= 0 && layer < blocks,
        "expert_tokens: layer {} of a model with {} MoE layers", layer,
        config_.is_moe() ? blocks : 0);
  return expert_tokens_[layer];
}

void Transformer::check_batch(int64_t B, int64_t T) const {
  check(B >= 1 && B <= max_batch_ && T >= 1 && T <= max_seq_,
        "batch {} x {} tokens does not fit the model's buffers of {} x {}", B, T, max_batch_,
        max_seq_);
  check(omp_get_max_threads() <= scratch_threads_,
        "thread count rose from {} to {} after the model was built", scratch_threads_,
        omp_get_max_threads());
  check(!tp_.sequence_parallel() || (B * T) % tp_.ranks() == 0,
        "sequence parallelism needs batch x seq_len ({} x {}) to be a multiple of mesh.tp = {}", B,
        T, tp_.ranks());
}

template <typename Body>
void Transformer::for_each_block(Body&& body) {
  aux_loss_ = 0;
  dropped_ = 0;
  for (int64_t l = 0; l < int64_t(blocks_.size()); ++l) {
    acquire_block(l);
    aux_loss_ += body(l);
    release_block(l);
    if (MoeLayer<float>* moe = blocks_[l]->moe()) {
      const auto counts = moe->tokens_per_expert();
      std::copy(counts.begin(), counts.end(), expert_tokens_[l].begin());
      dropped_ += moe->dropped();
    }
  }
}

double Transformer::communication_seconds() const {
  double seconds = parallel_.tp->seconds();
  if (parallel_.ep != parallel_.tp) seconds += parallel_.ep->seconds();
  if (parallel_.batch != parallel_.tp && parallel_.batch != parallel_.ep) {
    seconds += parallel_.batch->seconds();
  }
  return seconds;
}

void Transformer::enter(Phase next) {
  const auto now = std::chrono::steady_clock::now();
  const double communication = communication_seconds();
  if (phase_ != Phase::kIdle) {
    const double seconds = std::chrono::duration<double>(now - phase_start_).count();
    const double in_collectives = communication - phase_communication_start_;
    if (phase_ == Phase::kForward) {
      phases_.forward += seconds;
      phases_.forward_communication += in_collectives;
    } else {
      phases_.backward += seconds;
      phases_.backward_communication += in_collectives;
    }
  }
  phase_ = next;
  phase_start_ = now;
  phase_communication_start_ = communication;
}

void Transformer::run_blocks(const int32_t* inputs, int64_t B, int64_t T) {
  check_batch(B, T);
  enter(Phase::kForward);
  acquire(0);
  if (embedding_ != nullptr) {
    check_tokens(inputs, B * T);
    const trace::Span span("embedding forward", "compute");
    embedding_->forward(*access_, tokens_for_kernels(inputs, B * T, 0), acts_.slot_inputs[slot_], B,
                        T);
  }
  for_each_block([&](int64_t l) {
    const trace::Span span("block {} forward", "compute", layout_.first_block + l);
    return blocks_[l]->forward(*access_, input_of(l), B, T);
  });
  if (head_ != nullptr) head_->norm(*access_, stage_output(), tp_.rows(B * T));
}

const float* Transformer::stage_output() const { return acts_.slot_blocks[slot_].back().res_out; }

float* Transformer::stage_input(int64_t slot) {
  check(slot >= 0 && slot < options_.in_flight,
        "micro-batch slot {} of a model built for {} in flight", slot, options_.in_flight);
  return acts_.slot_inputs[slot];
}

float Transformer::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  select_slot(0);
  run_blocks(inputs, B, T);
  float loss = 0.0f;
  if (head_ != nullptr) {
    head_->logits(*access_, B * T);
    if (targets != nullptr) {
      check_tokens(targets, B * T);
      loss = head_->loss(tokens_for_kernels(targets, B * T, max_batch_ * max_seq_), B * T, 0.0f);
    }
  }
  release(0);
  enter(Phase::kIdle);
  return loss;
}

const float* Transformer::next_token_logits(const int32_t* tokens, int64_t T) {
  check(!tp_.active() && embedding_ != nullptr && head_ != nullptr,
        "next_token_logits runs the whole model on one rank");
  select_slot(0);
  run_blocks(tokens, 1, T);
  head_->logits_of_rows(*access_, T - 1, 1);
  release(0);
  enter(Phase::kIdle);
  return acts_.logits;
}

int64_t Transformer::check_decode(const KvCacheView& cache,
                                  std::span<const DecodeChunk> chunks) const {
  const ModelConfig& c = config_;
  check(!training_, "decode: the model was built for training; build it with training=false");
  check(!tp_.sequence_parallel(),
        "decode runs every row on every tensor-parallel rank: build the inference model without "
        "sequence parallelism");
  const KvRows rows = kv_rows(layout_);
  check(int64_t(cache.k.size()) == rows.layers && int64_t(cache.v.size()) == rows.layers,
        "decode: the cache holds {} key and {} value layers but the model has {}", cache.k.size(),
        cache.v.size(), rows.layers);
  check(cache.block_tokens >= 1, "decode: the cache's blocks hold {} tokens", cache.block_tokens);
  check(!chunks.empty(), "decode: no sequences to run");
  int64_t N = 0;
  for (size_t s = 0; s < chunks.size(); ++s) {
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
    N += d.n;
  }
  check(omp_get_max_threads() <= scratch_threads_,
        "thread count rose from {} to {} after the model was built", scratch_threads_,
        omp_get_max_threads());
  return N;
}

const float* Transformer::decode(const KvCacheView& cache, std::span<const DecodeChunk> chunks) {
  check_decode(cache, chunks);
  const ModelConfig& c = config_;
  const int64_t C = c.d_model, num_chunks = int64_t(chunks.size());
  int64_t N = 0;
  for (int64_t s = 0; s < num_chunks; ++s) {
    const DecodeChunk& d = chunks[s];
    std::copy_n(d.tokens, d.n, decode_tokens_.begin() + N);
    paged_chunks_[s] = {d.block_table.data(), d.start, d.n, N};
    N += d.n;
  }
  const KvRows rows = kv_rows(layout_);
  acquire(0);
  const Access& p = *access_;
  const std::span<const k::PagedChunk> paged(paged_chunks_.data(), size_t(num_chunks));
  if (embedding_ != nullptr) {
    embedding_->forward_chunks(p, tokens_for_kernels(decode_tokens_.data(), N, 0), paged,
                               acts_.embedded, N);
  }
  const int64_t kv_heads = rows.row_width / c.head_dim();
  for_each_block([&](int64_t l) {
    const k::PagedKv kv{cache.k[l], cache.v[l], cache.block_tokens, kv_heads, c.head_dim()};
    blocks_[l]->decode(p, input_of(l), kv, paged, N);
    return 0.0;
  });
  if (head_ == nullptr) {
    release(0);
    return stage_output();
  }
  // Only each chunk's last row needs logits; the embeddings are spent, so their rows hold them.
  for (int64_t s = 0; s < num_chunks; ++s) {
    const k::PagedChunk& chunk = paged_chunks_[s];
    k::copy_on_device(ctx_, acts_.embedded + s * C,
                      acts_.blocks.back().res_out + (chunk.row + chunk.n - 1) * C,
                      sizeof(float) * C);
  }
  head_->norm(p, acts_.embedded, num_chunks);
  head_->logits_of_rows(p, 0, num_chunks);
  release(0);
  return acts_.logits;
}

void Transformer::zero_grad() {
  const std::span<float> g = grads();
  k::fill_zeros(ctx_, g.data(), sizeof(float) * g.size());
}

float Transformer::forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B,
                                    int64_t T, float loss_scale) {
  check(training_, "forward_backward on a model built for inference");
  check(embedding_ != nullptr && head_ != nullptr,
        "forward_backward runs the whole model; a pipeline stage runs stage_forward");
  select_slot(0);
  run_blocks(inputs, B, T);
  const float loss = head_loss_and_backward(targets, B * T, loss_scale);
  backward_blocks(inputs, B, T, false);
  release(0);
  enter(Phase::kIdle);
  return loss;
}

float Transformer::stage_forward(int64_t slot, const int32_t* inputs, const int32_t* targets,
                                 int64_t B, int64_t T, float loss_scale) {
  check(training_, "stage_forward on a model built for inference");
  select_slot(slot);
  slots_[slot] = {B, T, loss_scale};
  run_blocks(inputs, B, T);
  float loss = 0;
  if (head_ != nullptr) {
    loss = head_loss_and_backward(targets, B * T, loss_scale);
    // The last block's output is spent: it keeps the head's input gradient until the backward.
    k::copy_on_device(ctx_, acts_.slot_blocks[slot].back().res_out, acts_.d_res,
                      sizeof(float) * stage_floats(B, T));
  }
  release(0);
  enter(Phase::kIdle);
  return loss;
}

void Transformer::stage_backward(int64_t slot, const int32_t* inputs) {
  backward_slot(slot, inputs, false);
  slots_[slot] = {};
}

void Transformer::stage_backward_input(int64_t slot, const int32_t* inputs) {
  check(options_.split_backward,
        "stage_backward_input: the model was not built to split its backward "
        "(ModelOptions::split_backward)");
  backward_slot(slot, inputs, true);
}

void Transformer::stage_backward_weight(int64_t slot) {
  check(options_.split_backward,
        "stage_backward_weight: the model was not built to split its backward "
        "(ModelOptions::split_backward)");
  select_slot(slot);
  const SlotState& state = slots_[slot];
  check(state.B > 0, "stage_backward_weight of slot {}, which holds no forward", slot);
  const Access& p = *access_;
  enter(Phase::kBackward);
  acquire(0);
  for (int64_t l = int64_t(blocks_.size()) - 1; l >= 0; --l) {
    with_block_gradients(l, [&] {
      const trace::Span span("block {} weight gradient", "compute", layout_.first_block + l);
      blocks_[l]->weight_backward(p, state.B * state.T);
    });
  }
  release(0);
  enter(Phase::kIdle);
  slots_[slot] = {};
}

void Transformer::backward_slot(int64_t slot, const int32_t* inputs, bool hold_weights) {
  check(training_, "stage_backward on a model built for inference");
  select_slot(slot);
  const SlotState& state = slots_[slot];
  check(state.B > 0, "stage_backward of slot {}, which holds no forward", slot);
  if (head_ != nullptr) {
    k::copy_on_device(ctx_, acts_.d_res, acts_.slot_blocks[slot].back().res_out,
                      sizeof(float) * stage_floats(state.B, state.T));
  }
  enter(Phase::kBackward);
  acquire(0);
  loss_scale_ = state.loss_scale;
  backward_blocks(inputs, state.B, state.T, hold_weights);
  release(0);
  enter(Phase::kIdle);
}

// The loss over the head's logits, its gradient fused into them, and the head's backward: its
// gradients accumulated and d(loss)/d(head input) in d_res.
float Transformer::head_loss_and_backward(const int32_t* targets, int64_t N, float loss_scale) {
  const trace::Span span("head, loss and head backward", "compute");
  head_->logits(*access_, N);
  check_tokens(targets, N);
  const float loss =
      head_->loss(tokens_for_kernels(targets, N, max_batch_ * max_seq_), N, loss_scale / float(N));
  enter(Phase::kBackward);
  loss_scale_ = loss_scale;
  unit_grads_[0] = store_->gradients(0);
  head_->backward(*access_, stage_output(), acts_.d_res, N);
  if (embedding_ == nullptr) {
    store_->gradients_done(0);
    unit_grads_[0] = nullptr;
  }
  return loss;
}

// Runs body, which accumulates block l's gradients, with the block's units acquired and their
// gradients open.
template <typename Body>
void Transformer::with_block_gradients(int64_t l, Body&& body) {
  acquire_block(l);
  const int64_t units[2] = {1 + l, layout_.has_experts() ? layout_.expert_unit(l) : -1};
  for (int64_t u : units) {
    if (u >= 0) unit_grads_[u] = store_->gradients(u);
  }
  body();
  for (int64_t u : units) {
    if (u < 0) continue;
    store_->gradients_done(u);
    unit_grads_[u] = nullptr;
  }
  release_block(l);
}

// From d_res = d(loss)/d(last block output): every block's backward, then the embedding's.
void Transformer::backward_blocks(const int32_t* inputs, int64_t B, int64_t T, bool hold_weights) {
  const Access& p = *access_;
  for (int64_t l = int64_t(blocks_.size()) - 1; l >= 0; --l) {
    with_block_gradients(l, [&] {
      const trace::Span span("block {} backward", "compute", layout_.first_block + l);
      blocks_[l]->backward(p, input_of(l), acts_.d_res, B, T, options_.recompute, loss_scale_,
                           hold_weights);
    });
  }
  if (embedding_ == nullptr) return;
  // Held since the head's backward when this stage has both ends.
  if (unit_grads_[0] == nullptr) unit_grads_[0] = store_->gradients(0);
  const trace::Span span("embedding backward", "compute");
  embedding_->backward(p, acts_.d_res, tokens_for_kernels(inputs, B * T, 0), B, T);
  store_->gradients_done(0);
  unit_grads_[0] = nullptr;
}

}  // namespace tessera::model
