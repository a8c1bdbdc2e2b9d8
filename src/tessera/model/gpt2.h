#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessera/core/arena.h"
#include "tessera/model/model_config.h"
#include "tessera/model/parameters.h"

namespace tessera::model {

// GPT-2: learned positions, pre-LayerNorm blocks, tanh-GELU MLP, tied input/output embeddings.
// Parameters, gradients and every activation backward needs are allocated once, at
// construction, for batches up to max_batch x max_seq; forward and backward never allocate.
class Gpt2 {
 public:
  Gpt2(const ModelConfig& config, int64_t max_batch, int64_t max_seq, bool training);

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  int64_t num_parameters() const;  // counts the tied embedding once, excludes padding
  std::span<float> params() { return {params_, size_t(layout_.total())}; }
  std::span<float> grads() { return {grads_, size_t(layout_.total())}; }

  // GPT-2 initialisation: N(0, 0.02), residual projections scaled by 1/sqrt(2 n_layer).
  void init_weights(uint64_t seed);

  // Runs the model over inputs[B,T]. With targets, returns the mean cross-entropy; without,
  // returns 0 and leaves the logits readable.
  float forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);
  // One training micro-step: returns the mean cross-entropy and accumulates
  // d(loss_scale * mean loss)/d(params) into grads(). The loss gradient is fused into the
  // softmax, so the [B*T, vocab] logits are produced once and overwritten by their gradient.
  float forward_backward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T,
                         float loss_scale);
  void zero_grad();
  const float* logits() const { return logits_; }

  // Logits of the next token after tokens[0..T), for sampling. Only the last row goes through
  // the output projection.
  const float* next_token_logits(const int32_t* tokens, int64_t T);

 private:
  // Offsets of one block's parameters in the flat buffer; the same offsets index the gradients.
  struct LayerOffsets {
    int64_t ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w,
        fcproj_b;
  };
  struct LayerActivations {
    float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *res_mid, *ln2, *ln2_mean, *ln2_rstd, *fch,
        *fch_gelu, *res_out;
  };
  void build_layout();
  void allocate(Arena& arena);
  void check_tokens(const int32_t* tokens, int64_t n) const;
  void run_blocks(const int32_t* inputs, int64_t B, int64_t T);
  // run_blocks, then the tied output projection of every position into logits_.
  void compute_logits(const int32_t* inputs, int64_t B, int64_t T);
  float loss_over_logits(const int32_t* targets, int64_t BT, float grad_scale);
  void backward(const int32_t* inputs, int64_t B, int64_t T);

  ModelConfig config_;
  int64_t max_batch_, max_seq_;
  bool training_;
  ParameterLayout layout_;
  std::vector<LayerOffsets> layers_;
  Arena arena_;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  std::vector<LayerActivations> acts_;
  float *embedded_, *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *losses_, *attention_scratch_;
  float *d_res_, *d_c_, *d_3c_, *d_4c_;
  int scratch_threads_ = 0;
  int64_t wpe_offset_ = 0, lnf_w_offset_ = 0, lnf_b_offset_ = 0;  // wte sits at offset 0
};

}  // namespace tessera::model
