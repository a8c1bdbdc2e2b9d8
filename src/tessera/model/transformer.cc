#include "tessera/model/transformer.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/core/trace.h"
#include "tessera/kernels/device.h"
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

// Token ids below this are exact in f32, as a context-parallel group gathers them.
constexpr int64_t kExactTokenFloats = int64_t(1) << 24;

// What the options allow: micro-batches in flight, a split backward, packed documents and context
// parallelism for training, quantised weights for a dense f32 inference model that keeps its
// own parameters.
void check_options(const ModelConfig& config, const ModelOptions& options, bool training) {
  check(options.in_flight >= 1 && (training || options.in_flight == 1),
        "a model holds 1 or more micro-batches in flight, and only for training; got {}",
        options.in_flight);
  check(training || !options.split_backward,
        "a model built for inference has no backward to split");
  check(training || !options.document_separator,
        "packed documents are for training; a model built for inference decodes each sequence "
        "in its own cache");
  check(options.adapters == nullptr || !training,
        "adapters served per request need a model built for inference");
  if (const SequenceSplit split =
          options.parallel != nullptr ? options.parallel->sequence_split() : SequenceSplit{};
      split.active()) {
    check(training,
          "context parallelism (mesh.cp = {}) splits training sequences; a model built for "
          "inference decodes each sequence on one rank",
          split.ranks);
    check(!config.is_moe(),
          "context parallelism (mesh.cp = {}) with a mixture of experts ({} experts) is not "
          "supported: its routing capacity is taken over whole micro-batches; use mesh.cp = 1",
          split.ranks, config.moe.n_experts);
    check(!options.document_separator || config.vocab_size <= kExactTokenFloats,
          "context parallelism gathers a sequence's token ids as f32, exact below {}, but "
          "model.vocab_size is {}",
          kExactTokenFloats, config.vocab_size);
  }
  QuantizedWeights::check_model(config, options.weights, options.precision, training,
                                options.store != nullptr);
}

}  // namespace

Transformer::Transformer(const ModelConfig& config, int64_t max_batch, int64_t max_seq,
                         bool training, const ModelOptions& options)
    : config_(config),
      options_(options),
      ctx_(options.context != nullptr ? *options.context : k::kCpuContext),
      parallel_(with_defaults(options.parallel, &alone_)),
      split_(parallel_.sequence_split()),
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
  check(split_.full_length(max_seq_) <= config_.max_seq,
        "sequence length {} exceeds model.max_seq {}", split_.full_length(max_seq_),
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
                     .cp = split_.ranks,
                     .moe = config_.is_moe(),
                     .quantized_weights = options_.weights,
                     .qk_norm = config_.qk_norm},
                    fmt::format("a model built on {} device {}", enum_name(ctx_.device.kind),
                                ctx_.device.ordinal));
  hold_parameters();
  scratch_threads_ = omp_get_max_threads();
  if (split_.active() && options_.document_separator) {
    sequence_tokens_.resize(size_t(2 * split_.full_length(N)));
  }
  adapter_rows_.reserve(size_t(options_.adapters != nullptr ? N : 0));
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
                                             options_.split_backward,
                                             options_.document_separator.has_value(),
                                             split_.ranks};
  {
    Arena counting = Arena::counting();
    Allocator counter(counting);
    allocate_activations(config_, layout_, activation_options, counter);
    if (ctx_.on_cuda()) {
      device_activations_ = k::DeviceArray<std::byte>(ctx_, int64_t(counting.used()));
      arena_ = Arena::over(device_activations_.data(), counting.used());
      device_tokens_ = k::DeviceArray<int32_t>(ctx_, 2 * N);
      host_losses_.resize(N);
      if (options_.document_separator) host_doc_starts_.resize(split_.full_length(N));
    } else {
      arena_ = Arena(counting.used());
    }
  }
  Allocator real(arena_);
  acts_ = allocate_activations(config_, layout_, activation_options, real);
  activation_bytes_ = activation_bytes(config_, parallel_.sharding, activation_options);

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
  slot_dropout_keys_.assign(size_t(options_.in_flight), 0);
  acts_.workspace.lora_dropout_key = &dropout_key_;
  const BlockWorkspace& ws = acts_.workspace;
  if (layout_.has_embedding) {
    embedding_ = std::make_unique<Embedding>(ctx_, layout_, tp_, parallel_.tp, ws.parallel,
                                             acts_.position_grads, split_);
  }
  for (int64_t l = 0; l < blocks; ++l) {
    MoeLayer<float>* moe = moe_.empty() ? nullptr : moe_[moe_.size() == 1 ? 0 : l].get();
    blocks_.push_back(std::make_unique<Block>(ctx_, layout_.spec, layout_, l, parallel_, format_,
                                              ws, acts_.blocks[l], moe, config_.max_seq,
                                              options_.adapters));
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

void Transformer::hold_parameters() {
  if (store_ == nullptr) {
    std::optional<k::LowPrecision> low;
    if (format_.low) low = format_.precision;
    resident_ = std::make_unique<ResidentParameters>(ctx_, layout_, low, training_);
    store_ = resident_.get();
  }
  if (options_.weights != WeightFormat::kDense) {
    quantized_ = std::make_unique<QuantizedWeights>(layout_, options_.weights);
  }
}

int64_t Transformer::num_parameters() const { return count_parameters(config_).total; }

int64_t Transformer::matmul_weight_bytes_per_token() const {
  return int64_t(matmul_weight_reads(layout_, options_.precision, options_.weights).per_token());
}

int64_t Transformer::resident_parameter_bytes() const {
  if (resident_ == nullptr) return 0;
  const int64_t total = layout_.params.total();
  return 4 * total + (format_.low ? 2 * total : 0) +
         (quantized_ != nullptr ? quantized_->bytes() : 0);
}

ResidentParameters& Transformer::resident() {
  check(resident_ != nullptr, "the model's parameters are held by its parameter store");
  return *resident_;
}

std::span<float> Transformer::params() {
  if (quantized_ != nullptr) quantized_->mark_stale();
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
  if (quantized_ != nullptr) quantized_->refresh(unit, weights_[unit].f32);
}

void Transformer::release(int64_t unit) {
  store_->release(unit);
  weights_[unit] = {};
}

void Transformer::acquire_block(int64_t l) {
  for (int64_t u : layout_.block_units(l)) {
    if (u >= 0) acquire(u);
  }
}

void Transformer::release_block(int64_t l) {
  for (int64_t u : layout_.block_units(l)) {
    if (u >= 0) release(u);
  }
}

void Transformer::check_tokens(const int32_t* tokens, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    check(tokens[i] >= 0 && tokens[i] < config_.vocab_size,
          "token id {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
          config_.vocab_size);
  }
}

int64_t Transformer::trained_targets(const int32_t* targets, int64_t n) const {
  int64_t trained = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] == kIgnoredTarget) continue;
    check(targets[i] >= 0 && targets[i] < config_.vocab_size,
          "target id {} at position {} is outside the vocabulary [0, {})", targets[i], i,
          config_.vocab_size);
    ++trained;
  }
  return trained;
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
  dropout_key_ = slot_dropout_keys_[size_t(slot)];
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
  split_.check_rows(T);
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
  double seconds =
      parallel_.tp->seconds() + (parallel_.cp != nullptr ? parallel_.cp->seconds() : 0);
  if (parallel_.ep != parallel_.tp) seconds += parallel_.ep->seconds();
  if (parallel_.batch != parallel_.tp && parallel_.batch != parallel_.ep) {
    seconds += parallel_.batch->seconds();
  }
  return seconds;
}

void Transformer::begin_pass(int64_t slot) {
  select_slot(slot);
  acquire(0);
}

void Transformer::end_pass() { release(0); }

void Transformer::set_dropout_key(int64_t slot, uint64_t key) {
  check(slot >= 0 && slot < options_.in_flight,
        "micro-batch slot {} of a model built for {} in flight", slot, options_.in_flight);
  slot_dropout_keys_[size_t(slot)] = key;
  if (slot == slot_) dropout_key_ = key;
}

void Transformer::forward_blocks(const int32_t* inputs, int64_t B, int64_t T) {
  check_batch(B, T);
  if (options_.document_separator) find_documents(inputs, B, T);
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

// With context parallelism a rank holds two chunks of each sequence: the ranks gather the whole
// sequences' tokens first, and the starts are of whole sequences' positions, which attention reads.
void Transformer::find_documents(const int32_t* inputs, int64_t B, int64_t T) {
  check(inputs != nullptr,
        "packed documents: every pipeline stage needs the pass's tokens to find its documents");
  const int64_t full = split_.full_length(T);
  if (split_.active()) {
    float* gathered = sequence_tokens_.data();
    float* sequences = gathered + full * B;
    std::copy_n(inputs, B * T, sequences);
    parallel_.cp->all_gather(sequences, gathered, B * T);
    for (int64_t q = 0; q < split_.ranks; ++q) {
      split_.to_sequences(q, gathered + q * B * T, 1, sequences, 1, B, T, 1);
    }
  }
  const auto token = [&](int64_t i) {
    return split_.active() ? int32_t(sequence_tokens_[size_t(full * B + i)]) : inputs[i];
  };
  int32_t* starts = ctx_.on_cuda() ? host_doc_starts_.data() : acts_.slot_doc_starts[slot_];
  for (int64_t b = 0; b < B; ++b) {
    int32_t start = 0;
    for (int64_t t = 0; t < full; ++t) {
      if (t > 0 && token(b * full + t - 1) == *options_.document_separator) start = int32_t(t);
      starts[b * full + t] = start;
    }
  }
  if (ctx_.on_cuda()) {
    k::copy_to_device(ctx_, acts_.slot_doc_starts[slot_], starts, sizeof(int32_t) * B * full);
  }
}

float* Transformer::stage_output(int64_t slot) {
  check(slot >= 0 && slot < options_.in_flight,
        "micro-batch slot {} of a model built for {} in flight", slot, options_.in_flight);
  return acts_.slot_blocks[slot].back().res_out;
}

const float* Transformer::stage_output() const { return acts_.slot_blocks[slot_].back().res_out; }

float* Transformer::stage_input(int64_t slot) {
  check(slot >= 0 && slot < options_.in_flight,
        "micro-batch slot {} of a model built for {} in flight", slot, options_.in_flight);
  return acts_.slot_inputs[slot];
}

float Transformer::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                           uint64_t dropout_key) {
  set_dropout_key(0, dropout_key);
  begin_pass(0);
  forward_blocks(inputs, B, T);
  float loss = 0.0f;
  if (head_ != nullptr) {
    head_->logits(*access_, B * T);
    if (targets != nullptr) loss = mean_loss(targets, B * T, 0.0f);
  }
  end_pass();
  return loss;
}

const float* Transformer::next_token_logits(const int32_t* tokens, int64_t T) {
  check(!tp_.active() && !split_.active() && embedding_ != nullptr && head_ != nullptr,
        "next_token_logits runs the whole model on one rank");
  set_dropout_key(0, 0);
  begin_pass(0);
  forward_blocks(tokens, 1, T);
  head_->logits_of_rows(*access_, T - 1, 1);
  end_pass();
  return acts_.logits;
}

const float* Transformer::forward_paged(const int32_t* tokens,
                                        std::span<const k::PagedChunk> chunks,
                                        std::span<const int64_t> logit_rows,
                                        std::span<const k::PagedKv> kv, int64_t N,
                                        std::span<const int32_t> chunk_adapters) {
  check(!training_ && N >= 1 && N <= max_tokens() && int64_t(kv.size()) == kv_rows(layout_).layers,
        "forward_paged: {} tokens over {} cache layers on a model built for {} tokens and {} "
        "layers{}",
        N, kv.size(), max_tokens(), kv_rows(layout_).layers, training_ ? ", for training" : "");
  check(omp_get_max_threads() <= scratch_threads_,
        "thread count rose from {} to {} after the model was built", scratch_threads_,
        omp_get_max_threads());
  const int64_t C = config_.d_model, num_chunks = int64_t(chunks.size());
  check(logit_rows.size() == chunks.size(), "forward_paged: logit rows for {} of {} chunks",
        logit_rows.size(), chunks.size());
  for (int64_t s = 0; s < num_chunks; ++s) {
    check(logit_rows[s] >= 1 && logit_rows[s] <= chunks[s].n,
          "forward_paged: the logits of {} of a chunk's {} rows", logit_rows[s], chunks[s].n);
  }
  if (embedding_ != nullptr) check_tokens(tokens, N);
  if (options_.adapters != nullptr) {
    check(chunk_adapters.empty() || chunk_adapters.size() == chunks.size(),
          "forward_paged: adapters for {} of {} chunks", chunk_adapters.size(), chunks.size());
    adapter_rows_.clear();
    for (int64_t s = 0; s < num_chunks && !chunk_adapters.empty(); ++s) {
      adapter_rows_.push_back({chunks[s].row, chunks[s].n, chunk_adapters[s]});
    }
    options_.adapters->set_segments(adapter_rows_);
  } else {
    check(chunk_adapters.empty(), "forward_paged: adapters for a model that serves none");
  }
  begin_pass(0);
  const Access& p = *access_;
  if (embedding_ != nullptr) {
    embedding_->forward_chunks(p, tokens_for_kernels(tokens, N, 0), chunks, acts_.embedded, N);
  }
  for_each_block([&](int64_t l) {
    blocks_[l]->decode(p, input_of(l), kv[l], chunks, N);
    return 0.0;
  });
  if (head_ == nullptr) {
    end_pass();
    return stage_output();
  }
  // Only each chunk's last rows need logits; the embeddings are spent, so their rows hold them.
  int64_t rows = 0;
  for (int64_t s = 0; s < num_chunks; ++s) {
    const k::PagedChunk& chunk = chunks[s];
    const int64_t m = logit_rows[s];
    k::copy_on_device(ctx_, acts_.embedded + rows * C,
                      acts_.blocks.back().res_out + (chunk.row + chunk.n - m) * C,
                      sizeof(float) * C * m);
    rows += m;
  }
  head_->norm(p, acts_.embedded, rows);
  head_->logits_of_rows(p, 0, rows);
  end_pass();
  return acts_.logits;
}

void Transformer::zero_grad() {
  const std::span<float> g = grads();
  k::fill_zeros(ctx_, g.data(), sizeof(float) * g.size());
}

float Transformer::head_loss(const int32_t* targets, int64_t N, float loss_scale) {
  check(training_ && head_ != nullptr, "head_loss: the model {}",
        training_ ? "has no head (a pipeline stage before the last)" : "was built for inference");
  const trace::Span span("head and loss", "compute");
  head_->logits(*access_, N);
  return mean_loss(targets, N, loss_scale);
}

float Transformer::mean_loss(const int32_t* targets, int64_t N, float loss_scale) {
  const int64_t trained = std::max<int64_t>(trained_targets(targets, N), 1);
  return float(head_->loss_sum(tokens_for_kernels(targets, N, max_tokens()), N,
                               loss_scale / float(trained)) /
               double(trained));
}

void Transformer::head_backward(int64_t N) {
  const trace::Span span("head backward", "compute");
  unit_grads_[0] = store_->gradients(0);
  head_->backward(*access_, stage_output(), acts_.d_res, N);
  if (embedding_ == nullptr) {
    store_->gradients_done(0);
    unit_grads_[0] = nullptr;
  }
}

// Runs body, which accumulates block l's gradients, with the block's units acquired and their
// gradients open.
template <typename Body>
void Transformer::with_block_gradients(int64_t l, Body&& body) {
  acquire_block(l);
  const std::array<int64_t, 4> units = layout_.block_units(l);
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

void Transformer::backward_blocks(const int32_t* inputs, int64_t B, int64_t T, float loss_scale,
                                  bool hold_weights) {
  check(training_, "backward of a model built for inference");
  check(!hold_weights || options_.split_backward,
        "the model was not built to split its backward (ModelOptions::split_backward)");
  const Access& p = *access_;
  for (int64_t l = int64_t(blocks_.size()) - 1; l >= 0; --l) {
    with_block_gradients(l, [&] {
      const trace::Span span("block {} backward", "compute", layout_.first_block + l);
      blocks_[l]->backward(p, input_of(l), acts_.d_res, B, T, options_.recompute, loss_scale,
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

void Transformer::weight_backward_blocks(int64_t N) {
  check(options_.split_backward,
        "the model was not built to split its backward (ModelOptions::split_backward)");
  const Access& p = *access_;
  for (int64_t l = int64_t(blocks_.size()) - 1; l >= 0; --l) {
    with_block_gradients(l, [&] {
      const trace::Span span("block {} weight gradient", "compute", layout_.first_block + l);
      blocks_[l]->weight_backward(p, N);
    });
  }
}

}  // namespace tessera::model
